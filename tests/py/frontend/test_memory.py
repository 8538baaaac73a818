# Compiled functions give their memory back: compiling and dropping
# thousands of distinct functions (code made at run time, as eval and exec
# make it) leaves the memory in use flat. Measured as the bytes malloc has
# handed out and not had back (mallinfo2: C++, LLVM and the JIT's memory)
# plus Python's allocated blocks: resident memory also holds the
# allocator's free pages, which vary by megabytes from run to run. Runs in a
# child process, so that the measure is of kiln alone.
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import ctypes, gc, sys, torch, kiln
    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
            "fsmblks", "uordblks", "fordblks", "keepcost")]
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    def in_use():
        info = libc.mallinfo2()
        return info.uordblks + info.hblkhd + 32 * sys.getallocatedblocks()
    x = torch.randn(16)
    def one_round(count, start):
        functions = []
        for k in range(start, start + count):
            f = kiln.compile(eval(f"lambda x: x * {k} + 1"))
            f(x)
            functions.append(f)
        del functions
        gc.collect()
    count = 400
    one_round(count, 0)  # caches that fill once: schemas, bindings, ...
    base = in_use()
    rounds = 2
    for r in range(rounds):
        one_round(count, (r + 1) * count)
    per_function = (in_use() - base) / (rounds * count)
    print(f"memory kept per compiled-and-dropped function: {per_function:.0f} bytes")
    assert per_function < 2048, per_function
    stats = kiln._C.kernel_cache_info()
    assert stats["live"] == 0, stats
""")


def test_compiled_and_dropped_functions_return_their_memory():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                            timeout=300, env=dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
