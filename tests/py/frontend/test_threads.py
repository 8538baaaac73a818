# kiln under threads: first calls of many compiled functions at the same
# moment (each imports and builds kiln's handles), and concurrent
# recompiles of one function (the cache limit holds exactly). Each case runs
# several times in child processes with a timeout: a deadlock is a failure,
# not a hung test run.
import os
import subprocess
import sys
import textwrap

import pytest

CONCURRENT_FIRST_CALLS = textwrap.dedent("""
    import sys, threading
    sys.setswitchinterval(1e-5)
    import torch, kiln
    n = 8
    functions = [kiln.compile(lambda x, k=k: x * k + 1) for k in range(n)]
    barrier = threading.Barrier(n)
    results = [None] * n
    def first_call(i):
        x = torch.full((4,), 2.0)
        barrier.wait()
        results[i] = functions[i](x)
    threads = [threading.Thread(target=first_call, args=(i,)) for i in range(n)]
    for t in threads: t.start()
    for t in threads: t.join()
    for k, result in enumerate(results):
        assert torch.equal(result, torch.full((4,), 2.0) * k + 1), (k, result)
    print("ok")
""")

CONCURRENT_RECOMPILES = textwrap.dedent("""
    import sys, threading, warnings
    sys.setswitchinterval(1e-6)
    import torch, kiln
    warnings.simplefilter("ignore")  # the cache-limit warning
    n, limit = 24, 8
    f = kiln.compile(lambda x: x * 2 + 1, cache_limit=limit)
    barrier = threading.Barrier(n)
    errors = []
    def call(i):
        x = torch.ones(i + 2)  # a new size per thread: every call recompiles
        barrier.wait()
        try:
            assert torch.equal(f(x), x * 2 + 1)
        except Exception as error:
            errors.append(repr(error))
    threads = [threading.Thread(target=call, args=(i,)) for i in range(n)]
    for t in threads: t.start()
    for t in threads: t.join()
    info = kiln.cache_info(f)
    assert not errors, errors
    assert info["entries"] == limit, info["entries"]
    print("ok")
""")


def _run(script):
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120, env=dict(os.environ))
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]


@pytest.mark.parametrize("run", range(4))
def test_concurrent_first_calls_do_not_deadlock(run):
    _run(CONCURRENT_FIRST_CALLS)


@pytest.mark.parametrize("run", range(2))
def test_concurrent_recompiles_keep_the_cache_limit(run):
    _run(CONCURRENT_RECOMPILES)
