# Non-temporal output stores of large flat kernels and of the storing inner
# loop of row kernels (softmax, layer_norm): a scalar prologue aligns the
# streamed store (per row in row kernels), vector loops store past the
# caches, an sfence orders them. The size from which kernels stream is read once per process, so the
# small-threshold cases run in a child process.
import os
import platform
import subprocess
import sys
import textwrap

import pytest
import torch

import kiln

# Streaming stores are x86's (vmovnt*, sfence).
ON_X86 = platform.machine() in ("x86_64", "AMD64")

CHILD = textwrap.dedent(
    """
    import torch, kiln
    from torch.testing import assert_close

    def chain(x, y):
        return torch.relu(x * 1.5 + y) - 0.25

    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32):
        compiled = kiln.compile(chain, fullgraph=True)
        for size in (0, 1, 3, 7, 8, 9, 31, 33, 64, 100, 1000, 4099):
            for offset in range(0, 9, 3):   # data pointers off the vector boundary
                x = torch.randn(size + offset).mul(8).to(dtype)[offset:]
                y = torch.randn(size + 8).mul(8).to(dtype)[8 - offset:][:size]
                expected = chain(x, y)
                assert_close(compiled(x, y), expected, rtol=0, atol=0, msg=f"{dtype} {size} {offset}")
                # A strided output view: not flat, stores stay ordinary.
                out = compiled(x[::2], y[::2])
                assert_close(out, chain(x[::2], y[::2]), rtol=0, atol=0)
    # Row kernels: the normalising loop streams each row, whatever the row
    # length and offset of its start.
    import torch.nn.functional as F
    def rows(x, w):
        return torch.softmax(x, -1), F.layer_norm(x, x.shape[-1:], w, w)
    compiled = kiln.compile(rows, fullgraph=True)
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        for cols in (1, 5, 8, 13, 64, 67, 300):
            for offset in (0, 1, 3):
                x = torch.randn(37, cols + offset).mul(3).to(dtype)[:, offset:]
                w = torch.randn(cols).to(dtype)
                for got, want in zip(compiled(x, w), rows(x, w)):
                    assert_close(got, want, msg=f"{dtype} {cols} {offset}")
                got = compiled(x.t().contiguous().t(), w)   # column-major rows
                for got, want in zip(got, rows(x, w)):
                    assert_close(got, want)
    print("streamed", flush=True)
    """
)


def test_streamed_stores_match_eager_at_every_alignment():
    env = dict(os.environ, KILN_CPU_STREAMING_BYTES="1", KILN_LOGS="asm")
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "streamed" in done.stdout
    if ON_X86:
        assert "vmovnt" in done.stderr and "sfence" in done.stderr


def default_threshold():
    """The process's streaming size, which tests below reach; skips where
    streaming is off or would need outputs too large for a test."""
    threshold = kiln._C.cpu_streaming_bytes()
    if threshold <= 0 or threshold > 128 << 20:
        pytest.skip(f"streaming threshold {threshold} bytes")
    return threshold


def test_default_threshold_is_half_the_last_level_cache():
    sizes = []
    for index in range(8):
        try:
            with open(f"/sys/devices/system/cpu/cpu0/cache/index{index}/size") as file:
                text = file.read().strip()
        except OSError:
            continue
        sizes.append(int(text[:-1]) << {"K": 10, "M": 20}[text[-1]] if text[-1] in "KM" else int(text))
    if "KILN_CPU_STREAMING_BYTES" in os.environ or not ON_X86:
        pytest.skip("the threshold is set by the environment, or no x86")
    expected = max(sizes) // 2 if sizes else 16 << 20
    assert kiln._C.cpu_streaming_bytes() == expected


def test_large_output_streams_by_default(capfd, monkeypatch):
    # An output of the default threshold's size streams.
    elements = default_threshold() // 4
    monkeypatch.setenv("KILN_LOGS", "llvm")
    try:
        compiled = kiln.compile(lambda x: x * 2 + 1, fullgraph=True)
        x = torch.randn(elements + 5)[5:]
        torch.testing.assert_close(compiled(x), x * 2 + 1, rtol=0, atol=0)
    finally:
        monkeypatch.delenv("KILN_LOGS")
    ir = capfd.readouterr().err
    if ON_X86:
        assert "!nontemporal" in ir


def test_large_row_kernel_output_streams_by_default(capfd, monkeypatch):
    rows = -(-default_threshold() // (4 * 1024))
    monkeypatch.setenv("KILN_LOGS", "llvm")
    try:
        compiled = kiln.compile(lambda x: torch.softmax(x, -1), fullgraph=True)
        x = torch.randn(rows, 1027)[:, 3:]
        torch.testing.assert_close(compiled(x), torch.softmax(x, -1))
    finally:
        monkeypatch.delenv("KILN_LOGS")
    ir = capfd.readouterr().err
    if ON_X86:
        assert "!nontemporal" in ir
