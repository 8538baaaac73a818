# Accuracy of the CPU backend's own math (inline float32 exp, tanh and erf, and
# what is built on them) in units in the last place, against float64, over
# a sample of all float32 bit patterns and a dense grid of the range where
# results are finite and nonzero; NaNs and infinities must match eager's.
import ctypes
import platform

import pytest
import torch
import torch.nn.functional as F

import kiln


def float32_samples():
    bits = torch.arange(0, 2**31, 997, dtype=torch.int64).to(torch.int32)
    spread = torch.cat([bits.view(torch.float32), (-bits).view(torch.float32)])
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"),
                            88.72283, 88.72284, -87.33654, -103.97, -104.0, 0.55, -0.55,
                            1e-30, -1e-30, 1.1754944e-38])
    return torch.cat([spread, torch.linspace(-110, 100, 1_000_001), special])


def ulps(actual, exact):
    """|actual - exact| over the float32 spacing at `exact`, where both are finite."""
    rounded = exact.float().abs()
    spacing = (torch.nextafter(rounded, torch.tensor(float("inf"))) - rounded).double()
    spacing = spacing.clamp(min=2.0 ** -149)
    finite = torch.isfinite(exact) & torch.isfinite(actual)
    return ((actual.double() - exact).abs() / spacing)[finite].max().item()


@pytest.mark.parametrize("name,fn,bound", [
    ("exp", torch.exp, 1.1), ("tanh", torch.tanh, 1.6), ("erf", torch.erf, 1.1),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), None), ("gelu", F.gelu, None),
    ("sigmoid", torch.sigmoid, None), ("silu", F.silu, None),
])
def test_inline_math_accuracy(name, fn, bound):
    x = float32_samples()
    compiled = kiln.compile(fn, fullgraph=True)
    actual, expected = compiled(x), fn(x)
    # Some eager builds make NaN or inf of a finite result (torch 2.11's
    # AVX-512 gelu of +inf and of 3.4e38); there float64's result is the
    # reference.
    exact = fn(x.double())
    eager_artifact = (expected.isnan() & ~exact.isnan()) | (expected.isinf() & exact.float().isfinite())
    expected = torch.where(eager_artifact, exact.float(), expected)
    assert kiln.cache_info(compiled)["runners"][0].startswith("native")
    # Special values: the same NaNs, infinities and zeros as eager.
    assert torch.equal(actual.isnan(), expected.isnan())
    assert torch.equal(actual.isinf(), expected.isinf())
    assert torch.equal(actual[actual.isinf()], expected[expected.isinf()])
    if bound is not None:
        assert torch.equal(actual == 0, expected == 0)
        assert ulps(actual, exact) <= bound
    else:  # composites: as close to eager as eager's float32 tolerance, or
        # closer to float64 than eager is (torch 2.11's AVX-512 gelu(-5) is
        # off by 2.4e-7, 17%)
        finite = exact.isfinite() & expected.isfinite()
        near = (actual - expected).abs() <= 1e-6 + 4e-6 * expected.abs()
        better = (actual.double() - exact).abs() <= (expected.double() - exact).abs()
        assert bool((near | better | ~finite).all())
        torch.testing.assert_close(actual[~finite], expected[~finite], equal_nan=True)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 floating-point flags")
def test_gelu_and_masked_softmax_make_no_subnormal_numbers():
    # A subnormal result costs x86 a microcode assist per vector: GELU of
    # wide inputs (erfc's exp(-z^2) underflowing) and a softmax over a
    # causal mask (exp(-inf)) ran 4-5x slower. The underflow flag of the
    # calling thread (small kernels run there) says none was made.
    libc = ctypes.CDLL(None)
    fe_underflow, fe_all = 0x10, 0x3D
    mask = torch.ones(64, 64, dtype=torch.bool).triu(1)
    cases = [(F.gelu, torch.randn(2000) * 30),
             (lambda s: torch.softmax(s.masked_fill(mask, float("-inf")), -1), torch.randn(64, 64))]
    for fn, x in cases:
        compiled = kiln.compile(fn, fullgraph=True)
        expected = fn(x)
        compiled(x)
        libc.feclearexcept(fe_all)
        actual = compiled(x)
        assert libc.fetestexcept(fe_underflow) == 0
        torch.testing.assert_close(actual, expected)
