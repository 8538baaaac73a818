"""KILN_LOGS=profile: each step's time, printed when the process exits."""
import os
import subprocess
import sys

CHILD = """
import torch, kiln
def f(x, w):
    return torch.relu(x @ w) + 1
g = kiln.compile(f)
x, w = torch.randn(64, 64, dtype=torch.float64), torch.randn(64, 64, dtype=torch.float64)
for _ in range(3):
    out = g(x, w)
torch.testing.assert_close(out, f(x, w))
print("ran")
"""


def run(logs):
    env = dict(os.environ, KILN_LOGS=logs)
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "ran" in done.stdout
    return done.stderr


def test_profile_lists_kernels_and_extern_calls_with_their_runs():
    err = run("profile")
    assert "[kiln:profile]" in err
    table = err[err.index("[kiln:profile]"):]
    # A float64 product is an extern call into torch; the rest is a kernel.
    extern = [line for line in table.splitlines() if "extern aten::mm" in line]
    assert extern, table
    assert extern[0].split()[2] == "3", table  # runs: one per call
    # Page faults a run took (memory given back to the system and touched again).
    assert "faults/run" in table
    assert float(extern[0].split()[4]) >= 0, table
    assert "kernel " in table
    assert "of which kernels" in table


def test_no_profile_unless_asked():
    assert "[kiln:profile]" not in run("")
