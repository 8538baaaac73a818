# KILN_CPU_VECTOR_BITS=256 on an AVX-512 host: kernels (elementwise, row
# reductions with math calls, GEMMs) keep to 256-bit registers, as the
# knob promises (to compare widths, or to stay off AVX-512's clocks), and
# compute what eager does. The width is read once per process, so the case
# runs in a child process.
import os
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import torch, kiln
    from torch.testing import assert_close

    def model(x, w):
        return (torch.softmax(x, -1) @ w).sum(1), torch.tanh(x) * 2 + 1

    compiled = kiln.compile(model, fullgraph=True)
    for rows, cols in ((64, 64), (37, 100), (1, 7)):
        x, w = torch.randn(rows, cols), torch.randn(cols, 48)
        for got, want in zip(compiled(x, w), model(x, w)):
            assert_close(got, want, rtol=1e-5, atol=1e-4)
    print("narrowed", flush=True)
    """
)


def host_has_avx512():
    try:
        with open("/proc/cpuinfo") as file:
            return " avx512f" in file.read()
    except OSError:
        return False


def test_256_bit_vectors_on_an_avx512_host_use_no_512_bit_registers():
    if not host_has_avx512():
        pytest.skip("the host has no AVX-512")
    env = dict(os.environ, KILN_CPU_VECTOR_BITS="256", KILN_LOGS="asm")
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "narrowed" in done.stdout
    assert "ymm" in done.stderr
    assert "zmm" not in done.stderr
