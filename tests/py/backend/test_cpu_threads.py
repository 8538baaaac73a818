# Where kiln's CPU kernels run in parallel: on torch's OpenMP thread team,
# with torch's thread count unless kiln is given its own, or on kiln's own
# workers (KILN_OPENMP=0, or no OpenMP runtime in the process). Each case
# runs in a child process, so that the thread settings start fresh.
import os
import subprocess
import sys
import textwrap

import torch

CHILD = textwrap.dedent("""
    import torch, kiln
    from kiln import _C

    def check_kernels():
        # Large enough to be split into chunks across the threads.
        x = torch.randn(3, 300, 257)
        f = lambda x: torch.softmax(x, -1) * x.sum(-1, keepdim=True)
        torch.testing.assert_close(kiln.compile(f)(x), f(x))
        # A GEMM's tiles, in chunks of equal counts or one at a time.
        a, b = torch.randn(130, 150), torch.randn(150, 333)
        torch.testing.assert_close(kiln.compile(lambda a, b: a @ b)(a, b), a @ b,
                                   rtol=1e-4, atol=1e-4)
""")


def run_child(body, **environment):
    env = dict(os.environ)
    env.pop("KILN_NUM_THREADS", None)
    env.update(environment)
    result = subprocess.run([sys.executable, "-c", CHILD + textwrap.dedent(body)],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_kernels_follow_torchs_thread_count_on_its_openmp_team():
    run_child("""
        assert _C.threads_use_openmp()
        torch.set_num_threads(1)
        assert _C.num_threads() == 1
        check_kernels()
        torch.set_num_threads(3)
        assert _C.num_threads() == 3
        check_kernels()
        # kiln's own count leaves torch's alone, and 0 returns to torch's.
        _C.set_num_threads(2)
        assert _C.num_threads() == 2 and torch.get_num_threads() == 3
        check_kernels()
        _C.set_num_threads(0)
        assert _C.num_threads() == 3
    """)


def test_kiln_num_threads_sets_the_count_apart_from_torch():
    run_child("""
        torch.set_num_threads(1)
        assert _C.num_threads() == 4
        check_kernels()
    """, KILN_NUM_THREADS="4")


def test_kilns_own_workers_without_openmp():
    run_child("""
        import os
        assert not _C.threads_use_openmp()
        assert _C.num_threads() == (os.cpu_count() or 1)
        check_kernels()
        _C.set_num_threads(3)
        assert _C.num_threads() == 3
        check_kernels()
        _C.set_num_threads(0)
        assert _C.num_threads() == (os.cpu_count() or 1)
    """, KILN_OPENMP="0")


def test_kernels_of_few_chunks_keep_the_openmp_team():
    # GNU libgomp ends the threads a smaller team leaves out and starts new
    # ones for the next larger team: a kernel of 3 chunks run on a team of 3
    # between torch's regions of 4 would replace a thread on every call.
    out = run_child("""
        import os
        torch.set_num_threads(4)
        threads = lambda: set(os.listdir("/proc/self/task"))
        x = torch.randn(3, 65536)  # a reduction of 3 rows: 3 chunks
        f = kiln.compile(lambda x: (x * 2).sum(1))
        y = torch.randn(1 << 20)
        f(x), y.add(1)
        before = threads()
        for _ in range(10):
            torch.testing.assert_close(f(x), (x * 2).sum(1), rtol=1e-4,
                                       atol=1e-3)
            y.add(1)  # torch's region: the whole team
        print(len(threads() ^ before))
    """)
    assert out.split() == ["0"]
