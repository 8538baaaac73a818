# kiln._resume on its own: the continuation and resume code objects of a
# graph break, run by hand with the state a capture would rebuild. Needs no
# kiln._C (nor torch), so it runs on any CPython kiln supports (3.11, 3.12):
#   python tests/py/frontend/test_resume_code.py
import dis
import importlib.util
import math
import os
import sys
import traceback

_spec = importlib.util.spec_from_file_location(
    "kiln_resume", os.path.join(os.path.dirname(__file__), "..", "..", "..", "python", "kiln",
                                "_resume.py"))
resume = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(resume)

PRINTED = []


def show(*args, sep=" "):
    PRINTED.append(sep.join(str(arg) for arg in args))


def double(value):
    return value * 2


def subject(x, y, *, k=3):
    a = x + 1
    show("mid", a, sep="|")
    total = math.fsum([a, double(y), x])
    if total < 0:
        raise ValueError("negative total")
    return total * k


def calls(code):
    return [instruction.offset for instruction in dis.get_instructions(code)
            if instruction.opname == "CALL"]


def test_break_at_a_keyword_call():
    PRINTED.clear()
    x, y = 1.5, 2.0
    offset = calls(subject.__code__)[0]
    assert resume.refusal(subject.__code__, offset) is None
    # Locals x, y, k, a bound, total not; stack [NULL, show, "mid", a, "|"].
    function, (resume_code,), count, _ = resume.continuation(
        subject.__code__, offset, (True, True, True, True, False),
        (True, False, False, False, False), subject.__globals__)
    assert count == 5 and resume_code.co_argcount == 5 + 1  # the call's result
    a = x + 1
    assert function(x, y, 3, a, None, show, "mid", a, "|") == subject(x, y)
    assert PRINTED == ["mid|2.5"] * 2


def test_break_with_nulls_below_the_call():
    x, y = 0.5, -4.0
    offset = calls(subject.__code__)[1]
    # Stack [NULL, fsum, a, NULL, double, y]: the break is double(y).
    function, (resume_code,), *_ = resume.continuation(
        subject.__code__, offset, (True, True, True, True, False),
        (True, False, False, True, False, False), subject.__globals__)
    a = x + 1
    try:
        function(x, y, 3, a, None, math.fsum, a, double, y)
    except ValueError as error:
        frames = traceback.extract_tb(error.__traceback__)
        assert frames[-1].lineno == subject.__code__.co_firstlineno + 5
        assert frames[-2].lineno == subject.__code__.co_firstlineno + 3  # the continuation
        assert "raise ValueError" in frames[-1].line
    else:
        raise AssertionError("the resume function did not raise")
    x, y = 0.5, 4.0
    a = x + 1
    assert function(x, y, 3, a, None, math.fsum, a, double, y) == subject(x, y)
    # The same break makes the same resume code.
    again = resume.continuation(subject.__code__, offset, (True, True, True, True, False),
                                (True, False, False, True, False, False), subject.__globals__)
    assert again[1][0] is resume_code
    # A break inside the resume function maps back to the original code.
    code, base_offset = resume.base_of(resume_code, offset + 2)
    assert code is subject.__code__


def in_try(x):
    try:
        show(x)
    finally:
        x = x + 1
    return x


def in_loop(x):
    for i in range(2):
        show(i)
    return x


def refuse(text):
    raise ValueError(text)


def in_try_raising(x):
    try:
        y = refuse(x)
    except ValueError:
        y = "handled " + x
    finally:
        show("finally")
    return y


def test_refusals():
    assert resume.refusal(in_try.__code__, calls(in_try.__code__)[0]) is None
    # Inside a loop too: the resume function runs the rest of the loop.
    assert resume.refusal(in_loop.__code__, calls(in_loop.__code__)[1]) is None


def test_an_exception_at_a_break_inside_try_meets_its_handlers():
    # The continuation runs the instruction inside the original try block:
    # the except clause and the finally block see its exception.
    PRINTED.clear()
    code = in_try_raising.__code__
    offset = calls(code)[0]
    # Locals x bound, y not; stack [NULL, refuse, x].
    function, *_ = resume.continuation(code, offset, (True, False), (True, False, False),
                                         in_try_raising.__globals__)
    assert function("a", None, refuse, "a") == in_try_raising("a") == "handled a"
    assert PRINTED == ["finally", "finally"]


if __name__ == "__main__":
    for name, test in list(globals().items()):
        if name.startswith("test_"):
            test()
            print(name, "passed on", sys.version.split()[0])
