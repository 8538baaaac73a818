# Graph breaks: what kiln cannot capture (print, unknown C functions,
# .item() in control flow, side effects on the caller's objects) runs in
# CPython as one instruction between two captured graphs; the rest of the
# function is a resume function that the frame hook captures in turn. Every
# case is compared with eager on fresh random inputs. A break inside try and
# with blocks runs its instruction under them; inside a loop, the resume
# function runs the rest of the loop over the items still to come.
import functools
import os
import sys
import traceback
import warnings

import pytest
import torch
from torch import nn

import kiln

def assert_close(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


def check(fn, make_inputs, calls=3):
    """Compiles `fn`, compares it with eager over `calls` fresh inputs and
    returns the compiled function."""
    compiled = kiln.compile(fn)
    for _ in range(calls):
        args = make_inputs()
        assert_close(compiled(*args), fn(*args))
    return compiled


def assert_breaks(compiled, count, graphs):
    info = kiln.cache_info(compiled)
    assert not info["runs_in_cpython"], info["fallback_reason"]
    assert len(info["break_reasons"]) == count, info["break_reasons"]
    assert info["graph_count"] == graphs, info
    return info


def print_between(x, y):
    a = torch.relu(x) + y
    print("a =", a)
    return (a * y).sum(dim=0)


def test_print_between_tensor_ops(capsys):
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    expected = print_between(x, y)
    eager_out = capsys.readouterr().out
    compiled = kiln.compile(print_between)
    for _ in range(2):  # a capture, then a cache hit
        assert_close(compiled(x, y), expected)
        assert capsys.readouterr().out == eager_out  # printed once, the same value
    info = assert_breaks(compiled, 1, 2)
    assert info["hits"] == 1 and info["breaks"][0]["instruction"] == "CALL"
    assert info["breaks"][0]["location"] == f"{__file__}:{print_between.__code__.co_firstlineno + 2}"
    assert "print()" in info["breaks"][0]["reason"]
    # The part after the break is a graph of its own, captured by the hook.
    resumed = kiln.code_cache_info(info["breaks"][0]["resume"])
    assert resumed["entries"] == 1 and "aten::mul" in resumed["graphs"][0]
    assert "aten::relu" in info["graphs"][0]
    for _ in range(3):
        x, y = torch.randn(3, 4), torch.randn(3, 4)
        assert_close(compiled(x, y), print_between(x, y))


def calls_getpid(x):
    y = x.sin()
    pid = os.getpid()
    return y * 2 + (pid > 0)


def test_unknown_c_function_mid_function():
    compiled = check(calls_getpid, lambda: (torch.randn(5),))
    info = assert_breaks(compiled, 1, 2)
    assert "getpid" in info["break_reasons"][0]


def item_feeds_if(x):
    y = x.relu()
    if y.sum().item() > 3:
        return y * 2
    return y - 1


def test_item_feeding_an_if():
    compiled = kiln.compile(item_feeds_if)
    for scale in (0.1, 10.0, 0.1, 10.0):
        x = torch.randn(8) * scale
        assert_close(compiled(x), item_feeds_if(x))
    info = kiln.cache_info(compiled)
    assert not info["runs_in_cpython"] and "tensor.item()" in info["break_reasons"][0]
    assert "aten::relu" in info["graphs"][0]


def noisy(t, scale=2.0):
    print("in noisy")
    return t * scale


def break_in_helper(x, y):
    a = x.cos()
    b = noisy(a + y)
    return a + b


def test_break_inside_an_inlined_helper(capsys):
    compiled = check(break_in_helper, lambda: (torch.randn(4), torch.randn(4)))
    assert capsys.readouterr().out == "in noisy\n" * 6  # once per call, compiled or eager
    info = assert_breaks(compiled, 1, 2)
    # The break is the top frame's call; the reason names the helper's line.
    assert info["breaks"][0]["location"].endswith(f":{break_in_helper.__code__.co_firstlineno + 2}")
    assert "in noisy" in info["break_reasons"][0]
    # The helper itself ran in CPython through the hook, which captured it.
    assert kiln.code_cache_info(noisy)["entries"] >= 1


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.norm = nn.LayerNorm(6)

    def forward(self, x):
        h = self.norm(self.fc(x))
        print("block", h.shape)
        return torch.relu(h) + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(6, 6)
        self.block = Block()
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        x = torch.tanh(self.first(x))
        x = self.block(x)
        return self.head(x)


def test_break_inside_module_forward_with_submodules():
    torch.manual_seed(0)
    net = Net().eval()
    compiled = kiln.compile(net)
    with torch.no_grad():
        for rows in (3, 3, 5):
            x = torch.randn(rows, 6)
            assert_close(compiled(x), net(x))
    info = kiln.cache_info(compiled)
    assert not info["runs_in_cpython"], info["fallback_reason"]
    assert info["entries"] == 2 and len(info["breaks"]) == 2  # a recompile for 5 rows


def cat_around_a_break(a, b, c):
    return torch.cat([a, noisy(b, scale=3.0), c], dim=0) * 2


def tuple_around_a_break(a, b):
    parts = (1.5, a, noisy(b), "label", None)
    return parts[1] * parts[0] + parts[2]


def test_stack_with_tensors_and_constants_at_the_break():
    compiled = check(cat_around_a_break, lambda: (torch.randn(2, 3), torch.randn(1, 3),
                                                  torch.randn(4, 3)))
    assert_breaks(compiled, 1, 2)
    compiled = check(tuple_around_a_break, lambda: (torch.randn(3), torch.randn(3)))
    assert_breaks(compiled, 1, 2)


def several_breaks(x):
    a = x + 1
    print("one")
    b = a * 2
    n = os.getpid()
    c = b - a
    print("two", n > 0)
    return c.sum() + a.mean()


def test_several_breaks_in_one_function(capsys):
    compiled = check(several_breaks, lambda: (torch.randn(4, 4),))
    info = kiln.cache_info(compiled)
    assert info["graph_count"] == 4 and len(info["break_reasons"]) == 3
    assert capsys.readouterr().out.count("one\n") == 6


def many_locals(x, items, module, flag=None):
    t = x * 2
    n = x.shape[0]
    made = [t, n, "s"]
    table = {"k": t + 1, "n": n}
    nothing = None
    text = f"rows={n}"
    print(text)
    items.append(n)  # the caller's list: the same object after the break
    out = module(t) + made[0] + table["k"]
    assert nothing is None and flag is None and made[1] == n and table["n"] == n
    return out, made, table, text


def test_locals_of_many_kinds_live_across_the_break():
    torch.manual_seed(0)
    module = nn.Linear(3, 3)
    compiled = kiln.compile(many_locals)
    for rows in (2, 2, 4):
        x = torch.randn(rows, 3)
        seen, expected_seen = [], []
        with torch.no_grad():
            actual = compiled(x, seen, module)
            expected = many_locals(x, expected_seen, module)
        assert seen == expected_seen == [rows]
        assert_close(actual[0], expected[0])
        assert_close(actual[1][0], expected[1][0])
        assert actual[1][1:] == expected[1][1:] and actual[3] == expected[3]
        assert_close(actual[2]["k"], expected[2]["k"])
    assert kiln.cache_info(compiled)["breaks"]


def result_after_break(x):
    y = x.exp()
    print("between")
    z = y.log() + 1
    return {"z": z, "pair": (y, z * 2), "rows": x.shape[0]}


def test_return_value_built_after_the_break():
    compiled = kiln.compile(result_after_break)
    for _ in range(3):
        x = torch.rand(3, 2)
        actual, expected = compiled(x), result_after_break(x)
        assert actual.keys() == expected.keys() and actual["rows"] == expected["rows"]
        assert_close(actual["z"], expected["z"])
        assert_close(actual["pair"][1], expected["pair"][1])
    assert_breaks(compiled, 1, 2)


def keywords_at_break(x):
    y = x.abs()
    print("values", y.shape, sep="|", end="!\n")
    return y.sqrt()


def test_keyword_arguments_at_the_break(capsys):
    x = torch.randn(5)
    compiled = kiln.compile(keywords_at_break)
    assert_close(compiled(x), keywords_at_break(x))
    out = capsys.readouterr().out
    assert out == "values|torch.Size([5])!\n" * 2
    assert_breaks(compiled, 1, 2)


def shapes_across_a_break(x, y):
    a = torch.relu(x) + y
    print("rows", a.shape[0])
    return (a * y).sum(dim=0)


def test_recompiles_after_the_break():
    compiled = kiln.compile(shapes_across_a_break)
    for shape in ((2, 3), (2, 3), (4, 5), (1, 1), (4, 5)):
        x, y = torch.randn(shape), torch.randn(shape)
        assert_close(compiled(x, y), shapes_across_a_break(x, y))
    info = kiln.cache_info(compiled)
    assert info["entries"] == 3 and info["hits"] == 2 and len(info["breaks"]) == 3
    # Each entry's break resumes in the same resume function: its cache
    # holds one entry per shape.
    assert len({id(item["resume"]) for item in info["breaks"]}) == 1
    assert kiln.code_cache_info(info["breaks"][0]["resume"])["entries"] == 3


def test_fullgraph_raises_at_the_first_break():
    with pytest.raises(kiln.Unsupported, match="print"):
        kiln.compile(print_between, fullgraph=True)(torch.randn(2), torch.randn(2))


def break_in_try(x):
    y = x + 1
    try:
        print("in try")
    finally:
        y = y * 2
    return y


def break_in_with(x):
    y = x + 1
    with torch.no_grad():
        print("in with")
        y = y * 2
    return y


def break_in_for(x):
    total = x * 0
    for i in range(3):
        print("step", i)
        total = total + x * i
    return total


def break_in_while(x):
    i = 0
    while i < 2:
        print("step", i)
        i += 1
    return x * i


def break_in_nested_loops(x):
    for i in range(2):
        for j in (1.0, 2.0):
            x = x * j + i
            print("at", i, j)
        x = torch.tanh(x)
    return x


def break_then_break_statement(x):
    for i in range(5):
        x = x + i
        if x.sum().item() > 1e9:  # data-dependent: a break
            x = x * 0
        if i == 2:
            break
    else:
        x = x - 100
    return x


def break_over_zip_and_dict_items(x):
    scales = {"a": 2.0, "b": 3.0}
    for (name, scale), bias in zip(scales.items(), (0.5, -0.5)):
        x = x * scale + bias
        print(name)
    return x


class PrintingStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        for index, block in enumerate(self.blocks):
            x = torch.relu(block(x))
            print("block", index, x.shape)
        return x


# A break at each step: the frame's graph, then one resume graph a step
# (the resume function breaks at the same instruction in the next step).
@pytest.mark.parametrize("fn, breaks, graphs", [
    (break_in_for, 3, 4),
    (break_in_while, 2, 3),
    (break_in_nested_loops, 4, 5),
    (break_then_break_statement, 3, 4),  # .item() a step, then `break`
    (break_over_zip_and_dict_items, 2, 3),
])
def test_breaks_inside_loops_resume_in_the_loop(fn, breaks, graphs, capsys):
    # The resume function takes the loop's iterator as the items still to
    # come and runs the rest of the loop: each step's resume is captured.
    x = torch.randn(3)
    expected = fn(x)
    eager_out = capsys.readouterr().out
    compiled = kiln.compile(fn)
    for _ in range(2):  # a capture, then cache hits all the way through
        assert_close(compiled(x), expected)
        assert capsys.readouterr().out == eager_out
    assert_breaks(compiled, breaks, graphs)
    check(fn, lambda: (torch.randn(3),))
    capsys.readouterr()


def test_a_module_loop_with_a_break_in_each_block(capsys):
    model = PrintingStack().eval()
    x = torch.randn(2, 4)
    with torch.no_grad():
        expected = model(x)
        eager_out = capsys.readouterr().out
        compiled = kiln.compile(model)
        for _ in range(2):
            assert_close(compiled(x), expected)
            assert capsys.readouterr().out == eager_out
    info = assert_breaks(compiled, 3, 4)
    assert info["fallbacks"] == 0


def loop_over_list(x, items):
    for item in items:
        x = x + item
        print("item")
    return x


def loop_over_list_growing(x, items):
    # The loop grows the list it reads, after the break: the resume
    # function's iterator is the list's own, so the loop takes the new items
    # as eager's does.
    for item in items:
        x = x * 2 + item
        print("grow")
        if len(items) < 5:
            items.append(item + 1)
    return x, len(items)


def loop_over_list_changing_ahead(x, items):
    # The resume function changes an item the loop has not reached yet.
    total = x
    for item in items:
        total = total + item
        print("step")
        items[-1] = items[-1] * 3
    return total, items


def test_loops_over_lists_resume_with_the_lists_own_iterator(capsys):
    inputs = lambda: (torch.randn(3), [torch.randn(3), torch.randn(3), torch.randn(3)])
    compiled = check(loop_over_list, inputs)
    info = assert_breaks(compiled, 3, 4)  # before the loop, then a step each
    assert info["entries"] == 1 and info["hits"] == 2, info
    for fn in (loop_over_list_growing, loop_over_list_changing_ahead):
        compiled = kiln.compile(fn)
        for _ in range(3):  # each run changes its own list
            x, items = inputs()
            got = compiled(x, list(items))
            expected = fn(x, list(items))
            assert_close(got, expected)
        assert not kiln.cache_info(compiled)["runs_in_cpython"]


def zip_over_lists(x, items):
    for a, b in zip(items, reversed(items)):
        x = x + a * b
        print("pair")
    return x


def enumerate_over_list(x, items):
    for i, item in enumerate(items):
        x = x + item * i
        print("item")
    return x


def loop_over_own_iterator(x):
    steps = iter(range(3))
    for i in steps:
        print(i)
        x = x + i
    return x


def loop_break_inside_try(x):
    for i in range(2):
        try:
            print(i)
        except ValueError:
            pass
        x = x * 2
    return x


def enumerate_over_list_growing(x, items):
    for i, item in enumerate(items, 1):
        x = x * 2 + item * i
        print("grow")
        if len(items) < 5:
            items.append(item + 1)
    return x, len(items)


def reversed_over_list_growing(x, items):
    # A reversed list iterator goes on from its index: the items appended
    # are never reached.
    for item in reversed(items):
        x = x * 2 + item
        print("reversed")
        if len(items) < 5:
            items.append(item + 1)
    return x, len(items)


def zip_of_a_list_and_a_longer_tuple(x, items):
    # The tuple's items past the list's end are taken once the list grows.
    for a, b in zip(items, (1.0, 2.0, 3.0, 4.0, 5.0)):
        x = x * b + a
        print("zip")
        if len(items) < 4:
            items.append(a * 2)
    return x, len(items)


def enumerate_of_zip_of_lists(x, items):
    for i, (a, b) in enumerate(zip(items, items[1:])):
        x = x + a - b * i
        print(i)
    return x


def test_enumerate_zip_and_reversed_over_lists_resume_in_the_loop(capsys):
    # An enumerate, zip or reversed reads its lists as the loop goes: the
    # resume function makes it again over the lists at the positions
    # reached (kiln._resume.iterator_at), so changes to the lists reach the
    # rest of the loop as they reach eager's.
    inputs = lambda: (torch.randn(3), [torch.randn(3), torch.randn(3), torch.randn(3)])
    for fn, breaks in ((enumerate_over_list, 3), (zip_over_lists, 3),
                       (enumerate_of_zip_of_lists, 2)):
        compiled = check(fn, inputs)
        assert_breaks(compiled, breaks, breaks + 1)
    for fn in (enumerate_over_list_growing, reversed_over_list_growing,
               zip_of_a_list_and_a_longer_tuple):
        compiled = kiln.compile(fn)
        for _ in range(3):  # each run changes its own list
            x, items = inputs()
            assert_close(compiled(x, list(items)), fn(x, list(items)))
        info = kiln.cache_info(compiled)
        assert not info["runs_in_cpython"] and info["breaks"], info
    capsys.readouterr()


@pytest.mark.parametrize("fn, make_inputs, refusal", [
    (loop_over_own_iterator, lambda: (torch.randn(3),),
     "a loop's iterator that a local also holds"),
    (loop_break_inside_try, lambda: (torch.randn(3),),
     "inside a try or with block"),
])
def test_loop_iterators_that_cannot_leave_as_a_tuple_fall_back(fn, make_inputs, refusal,
                                                                capsys):
    compiled = check(fn, make_inputs)
    capsys.readouterr()
    info = kiln.cache_info(compiled)
    assert info["runs_in_cpython"] and not info["breaks"]
    assert refusal in info["fallback_reason"]


@pytest.mark.parametrize("fn", [break_in_try, break_in_with])
def test_breaks_inside_try_and_with_blocks(fn):
    compiled = check(fn, lambda: (torch.randn(3),))
    assert_breaks(compiled, 1, 2)
    assert torch.is_grad_enabled()


def grad_blocks_around_breaks(x):
    with torch.no_grad():
        with torch.enable_grad():
            y = x * 2
            print("inner", torch.is_grad_enabled())
            y = y + 1
        z = y * 3
        print("outer", torch.is_grad_enabled())
    return z, torch.is_grad_enabled()


def test_grad_mode_across_breaks_inside_grad_blocks(capsys):
    # The instruction at the break runs in the block's grad mode, the resume
    # function leaves the blocks, and the caller's mode is back at the end.
    compiled = kiln.compile(grad_blocks_around_breaks)
    for _ in range(2):
        x = torch.randn(3)
        expected, actual = grad_blocks_around_breaks(x), compiled(x)
        assert_close(actual[0], expected[0])
        assert actual[1:] == expected[1:] and torch.is_grad_enabled()
    printed = capsys.readouterr().out
    assert printed.count("inner True") == 4 and printed.count("outer False") == 4
    assert_breaks(compiled, 2, 3)


def break_raising_in_with(x, text):
    y = x + 1
    with torch.no_grad():
        z = y * 3
        number = int(text)  # a break: the capture's call raises
        w = z + number
    return w


def break_raising_in_try(x, text):
    y = x + 1
    try:
        number = int(text)
    except ValueError:
        number = -1
    return y * number


def test_an_exception_at_the_break_meets_the_blocks_around_it():
    compiled = kiln.compile(break_raising_in_with)
    x = torch.randn(3)
    assert_close(compiled(x, "2"), break_raising_in_with(x, "2"))
    with pytest.raises(ValueError, match="invalid literal"):
        compiled(x, "two")
    assert torch.is_grad_enabled()  # the block's __exit__ ran
    compiled = kiln.compile(break_raising_in_try)
    for text in ("3", "three", "4"):
        assert_close(compiled(x, text), break_raising_in_try(x, text))


class Recorder:
    """A context manager written in Python that records its calls."""

    def __init__(self):
        self.calls = []

    def __enter__(self):
        self.calls.append("enter")
        return self

    def __exit__(self, *exc_info):
        self.calls.append("exit" if exc_info[0] is None else "exit with error")
        return False


def break_in_user_context(x, recorder):
    with recorder:
        y = x * 2
        print("inside")
        y = y + 1
    return y


def test_a_break_inside_a_user_context_manager_exits_it_once():
    compiled = kiln.compile(break_in_user_context)
    for _ in range(2):
        x = torch.randn(3)
        eager, kilns = Recorder(), Recorder()
        assert_close(compiled(x, kilns), break_in_user_context(x, eager))
        assert kilns.calls == eager.calls == ["enter", "exit"]


def switches_grad_off(x):
    torch.set_grad_enabled(False)
    return x * 2


def test_a_frame_that_leaves_grad_mode_changed_leaves_it_so():
    compiled = kiln.compile(switches_grad_off)
    try:
        for _ in range(2):
            torch.set_grad_enabled(True)
            x = torch.randn(3)
            assert_close(compiled(x), x * 2)
            assert not torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(True)


def raises_after_break(x, limit):
    y = x * 2
    print("before the error")
    if limit < 0:
        raise ValueError("negative limit")  # the line a traceback must show
    return y + limit


def test_traceback_after_the_break_shows_the_user_line():
    compiled = kiln.compile(raises_after_break)
    assert_close(compiled(torch.ones(2), 1), torch.full((2,), 3.0))
    with pytest.raises(ValueError, match="negative limit") as error:
        compiled(torch.ones(2), -1)
    frames = traceback.extract_tb(error.value.__traceback__)
    raise_line = raises_after_break.__code__.co_firstlineno + 4
    assert (frames[-1].filename, frames[-1].lineno) == (__file__, raise_line)
    assert "raise ValueError" in frames[-1].line


def fails_at_the_break(x):
    y = x * 2
    print("before", undefined_name)  # noqa: F821
    return y


def test_an_error_at_the_break_instruction_shows_its_line():
    compiled = kiln.compile(fails_at_the_break)
    with pytest.raises(NameError):
        compiled(torch.ones(2))
    with pytest.raises(NameError) as error:
        fails_at_the_break(torch.ones(2))
    assert traceback.extract_tb(error.value.__traceback__)[-1].lineno == \
        fails_at_the_break.__code__.co_firstlineno + 2


def mutates_input_then_breaks(x, acc):
    x.add_(1)
    y = x * 2
    acc.append(y.shape[0])
    return x + y


def test_in_place_update_of_an_input_before_the_break():
    compiled = kiln.compile(mutates_input_then_breaks)
    for _ in range(3):
        x = torch.randn(4)
        x_eager = x.clone()
        acc, acc_eager = [], []
        actual = compiled(x, acc)
        expected = mutates_input_then_breaks(x_eager, acc_eager)
        assert_close(actual, expected)
        assert_close(x, x_eager)
        assert acc == acc_eager == [4]
    # The append to the caller's list is replayed after the graph.
    info = kiln.cache_info(compiled)
    assert not info["breaks"] and not info["runs_in_cpython"]


def explained(x, y):
    a = x.sin() * y
    print("explained")
    return a.cos() - y


def test_explain_and_logs_report_breaks(capfd, monkeypatch):
    x, y = torch.randn(2, 2), torch.randn(2, 2)
    out = kiln.explain(explained, x, y)
    assert out.graph_count == 2 and out.break_count == 1
    line = explained.__code__.co_firstlineno + 2
    assert out.op_count == 4 and out.graphs[1].function == f"explained.<resume after line {line}>"
    item = out.breaks[0]
    assert item.graph_break and not item.runs_in_cpython and item.instruction == "CALL"
    assert item.location == f"{__file__}:{explained.__code__.co_firstlineno + 2}"
    assert "print()" in item.reason
    assert_close(out.result, explained(x, y))
    assert "has a graph break at " + item.location + " (CALL): print()" in str(out)
    capfd.readouterr()
    monkeypatch.setenv("KILN_LOGS", "breaks")
    kiln.reload_logging()
    try:
        kiln.compile(several_breaks)(torch.randn(2))
    finally:
        monkeypatch.delenv("KILN_LOGS")
        kiln.reload_logging()
    err = capfd.readouterr().err
    assert err.count("has a graph break at") == 3
    assert f"several_breaks has a graph break at {__file__}:" in err


def alias_across_a_break(x):
    y = x
    print("alias")
    y.add_(1)  # through the alias: x changes too
    return x * 2, y is x


def constant_across_a_break(x):
    t = torch.tensor([1.0, 2.0])
    print("constant")
    t.add_(1)  # must not change the next call's constant
    return x + t


def test_aliases_and_constants_across_the_break():
    compiled = kiln.compile(alias_across_a_break)
    for _ in range(3):
        x = torch.randn(2)
        x_eager = x.clone()
        (actual, same), (expected, same_eager) = compiled(x), alias_across_a_break(x_eager)
        assert_close(actual, expected)
        assert_close(x, x_eager)
        assert same and same_eager
    assert kiln.cache_info(compiled)["breaks"]
    # The constant leaves the graph as a copy: each call's is fresh.
    compiled = check(constant_across_a_break, lambda: (torch.randn(2),))
    info = kiln.cache_info(compiled)
    assert info["breaks"] and not info["runs_in_cpython"], info["fallback_reason"]


def test_an_object_a_break_leaves_on_the_stack_is_this_calls_object():
    # The resume function returns what the break computed (a geqrf
    # structseq, guarded by its type only): each call must return its own,
    # not the first call's (op_db's geqrf, lu_factor, ldl_factor, lstsq).
    def fn(x):
        return torch.geqrf(x)

    compiled = kiln.compile(fn)
    for rows in (5, 3, 4, 3):
        x = torch.randn(rows, 2)
        actual, expected = compiled(x), fn(x)
        assert type(actual) is type(expected)
        for a, e in zip(actual, expected):
            torch.testing.assert_close(a, e)


def test_a_returned_input_object_is_this_calls_object():
    def fn(x, pair):
        return x + 1, pair

    compiled = kiln.compile(fn)
    for rows in (2, 2, 2):
        x = torch.randn(rows)
        pair = torch.return_types.max((x, x.clone()))
        result = compiled(x, pair)
        assert result[1] is pair


def _helper_after_break(y):
    return torch.sin(y) * 2


def test_resume_functions_compile_with_the_compiled_functions_options():
    # backend="eager" (and mode, cache_limit) reach the graphs after a break
    # and the frames the hook captures for a function that fell back.
    from kiln import _resume

    def fn(x):
        y = x + 1
        print("break", end="\r")
        return _helper_after_break(y) - 1

    compiled = kiln.compile(fn, backend="eager")
    x = torch.randn(8)
    torch.testing.assert_close(compiled(x), fn(x))
    torch.testing.assert_close(compiled(x), fn(x))
    assert kiln.cache_info(compiled)["breaks"], kiln.cache_info(compiled)
    resumed = list(_resume._resume_codes[fn.__code__].values())
    assert resumed
    for code in resumed:
        runners = kiln.code_cache_info(code)["runners"]
        assert runners and all(r.startswith("eager") for r in runners), runners


def _scaled_with_a_break(k):
    def inner(x):
        y = x * k
        print("inner", file=sys.stderr)  # a break inside a closure
        return y + k
    return inner


def test_a_break_inside_a_closure_resumes_with_each_functions_cells():
    twice, thrice = _scaled_with_a_break(2), _scaled_with_a_break(3)
    compiled_twice, compiled_thrice = kiln.compile(twice), kiln.compile(thrice)
    for _ in range(3):
        x = torch.randn(4)
        assert_close(compiled_twice(x), twice(x))
        assert_close(compiled_thrice(x), thrice(x))
    for compiled in (compiled_twice, compiled_thrice):
        info = kiln.cache_info(compiled)
        assert info["breaks"] and not info["runs_in_cpython"], info["fallback_reason"]


def _logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        out = fn(*args, **kwargs)
        print("logged", file=sys.stderr)
        return out * 2, len(args)
    return wrapper


@_logged
def _plus_one(x):
    return x + 1


@_logged
def _minus_one(x):
    return x - 1


def test_a_break_inside_a_decorator_wrapper():
    # Both wrappers share one code object, with different closures: the
    # code after the break must read each call's own `fn`.
    compiled_plus, compiled_minus = kiln.compile(_plus_one), kiln.compile(_minus_one)
    for _ in range(3):
        x = torch.randn(3)
        actual, count = compiled_plus(x)
        assert_close(actual, (x + 1) * 2)
        assert count == 1
        actual, count = compiled_minus(x)
        assert_close(actual, (x - 1) * 2)
        assert count == 1
    info = kiln.cache_info(compiled_plus)
    assert info["breaks"] and not info["runs_in_cpython"], info["fallback_reason"]


def test_a_closure_reading_a_cell_after_the_break():
    scale = torch.randn(3)

    def fn(x):
        y = x.sin()
        print("break", file=sys.stderr)
        return y * scale + len(str(scale.shape))

    info = kiln.cache_info(check(fn, lambda: (torch.randn(3),)))
    assert info["breaks"] and not info["runs_in_cpython"], info["fallback_reason"]


def test_break_inside_an_except_block_runs_the_frame_in_cpython():
    # The exception is caught during capture; a resume function would run
    # the rest of the except block without it being handled (a bare raise
    # there would fail), so the frame runs in CPython. A break after the
    # block is an ordinary graph break.
    def inside(x, d):
        try:
            y = d["missing"]
        except KeyError:
            print("handled")
            y = x * 2
        return y + 1

    def after(x, d):
        try:
            y = d["missing"]
        except KeyError:
            y = x * 2
        print("after")
        return y + 1

    x = torch.randn(3)
    compiled = kiln.compile(inside)
    torch.testing.assert_close(compiled(x, {}), inside(x, {}))
    assert kiln.cache_info(compiled)["runs_in_cpython"]
    compiled = kiln.compile(after)
    torch.testing.assert_close(compiled(x, {}), after(x, {}))
    assert len(kiln.cache_info(compiled)["breaks"]) == 1


def branch_on_a_sum(x):
    y = x * 2
    if y.sum() > 0:
        y = y + 1
    else:
        y = y - 1
    return y * 3


def branch_on_any(x):
    if torch.isnan(x).any() or (x > 1.5).all():
        return x * 0
    return x.relu()


def value_of_an_or(x):
    y = (x > 0).all() or x.sum()  # 3.11: JUMP_IF_TRUE_OR_POP keeps its operand
    return x + y


def while_on_a_norm(x):
    while x.norm() > 1:
        x = x / 2
    return x


def branch_in_a_loop(x):
    for i in range(3):
        if x.mean() > 0:
            x = x - i
        else:
            x = x + i
    return x


def conditional_expression(x):
    return x * 2 if x.max() > 0.5 else x * 3


def assert_on_values(x):
    assert (x < 100).all(), "too large"
    return x + 1


def branch_with_a_local_function_live(x):
    def inner(t, scale=2.0):
        return t * scale
    if x.sum() > 0:
        return inner(x)
    return inner(x, 3.0)


def branch_in_try(x):
    try:
        if x.sum() > 0:
            x = x + 1
    except RuntimeError:
        pass
    return x


# A branch on a tensor's truth is a graph break: the graph before it
# computes the condition, CPython decides the branch, and each side
# resumes in a function of its own (captured when its side is taken).
@pytest.mark.parametrize("fn, breaks", [
    (branch_on_a_sum, 1), (branch_on_any, None), (value_of_an_or, 1), (while_on_a_norm, None),
    (branch_in_a_loop, None), (conditional_expression, 1), (assert_on_values, 1),
    (branch_with_a_local_function_live, 1)])
def test_a_branch_on_a_tensor_is_a_graph_break(fn, breaks):
    compiled = kiln.compile(fn)
    for i in range(6):  # both sides of each branch, alternating
        x = torch.randn(3, 4) * (i + 1) * (1 if i % 2 else -1)
        assert_close(compiled(x), fn(x))
    info = kiln.cache_info(compiled)
    assert not info["runs_in_cpython"], info["fallback_reason"]
    if breaks is not None:
        assert len(info["breaks"]) == breaks and info["breaks"][0]["instruction"].startswith(
            ("POP_JUMP", "JUMP_IF")), info["breaks"]
        # The next instruction's resume function, then the target's.
        resumes = info["breaks"][0]["resumes"]
        assert len(resumes) == 2 and resumes[0] is not resumes[1]
    assert "a tensor's values" in info["break_reasons"][0]


def branch_both_sides(x):
    if x.sum() > 0:
        x = x + 1
    else:
        x = x - 1
    return x * 3


def test_a_branch_on_a_tensor_both_sides_captured():
    compiled = kiln.compile(branch_both_sides)
    compiled(torch.ones(3))
    compiled(-torch.ones(3))
    info = kiln.cache_info(compiled)
    taken, not_taken = (kiln.code_cache_info(code) for code in info["breaks"][0]["resumes"])
    assert taken["entries"] == 1 and not_taken["entries"] == 1
    assert "aten::add" in taken["graphs"][0] and "aten::sub" in not_taken["graphs"][0]
    assert info["graph_count"] == 3


def branch_under_no_grad(x):
    with torch.no_grad():
        y = x * 2
        if y.sum() > 0:
            y = y + 1
        z = y * 3
    return z, torch.is_grad_enabled()


def ambiguous_branch_caught(x):
    with torch.no_grad():
        try:
            if x > 0:  # more than one value: bool() raises in the try
                x = x + 1
        except RuntimeError:
            x = x - 1
    return x, torch.is_grad_enabled()


def test_a_branch_on_a_tensor_inside_try_and_with_blocks():
    # There the jump runs in the body under the blocks' handlers (which an
    # error of bool() reaches as in eager), and each side's first
    # instruction is a jump back to its trampoline.
    for fn in (branch_in_try, branch_under_no_grad, ambiguous_branch_caught):
        compiled = kiln.compile(fn)
        for i in range(4):
            x = torch.randn(3) * (1 if i % 2 else -1)
            assert_close(compiled(x), fn(x))
        assert torch.is_grad_enabled()
        info = kiln.cache_info(compiled)
        assert not info["runs_in_cpython"] and len(info["breaks"]) == 1, info


def ambiguous_condition(x):
    y = x + 1
    if y > 0:  # more than one value: bool() raises
        return y
    return -y


def test_an_ambiguous_tensor_condition_raises_as_eager_does():
    compiled = kiln.compile(ambiguous_condition)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="ambiguous"):
            compiled(torch.randn(3))
    assert_close(compiled(torch.tensor([2.0])), ambiguous_condition(torch.tensor([2.0])))
    assert not kiln.cache_info(compiled)["runs_in_cpython"]


def long_loop_with_a_print(x, n):
    for i in range(n):
        x = x * 0.5 + i
        print("step", i)
    return x


class DeepStackWithABranch(nn.Module):
    def __init__(self, depth):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
            if x.mean() > 100:  # data-dependent: a break in every layer
                x = x / 2
        return x


def test_a_loop_longer_than_the_cache_limit_breaks_at_every_step(capsys):
    # A loop's resume function takes one entry a step (the position is a
    # guarded constant): its cache keeps as many beyond the limit as the
    # loop has steps left, so no step of a 20-step loop runs in CPython.
    compiled = kiln.compile(long_loop_with_a_print)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "recompiled N times" warning
        for _ in range(2):
            x = torch.randn(3)
            assert_close(compiled(x, 20), long_loop_with_a_print(x, 20))
    info = kiln.cache_info(compiled)
    assert info["graph_count"] == 21 and not info["runs_in_cpython"], info
    assert kiln.code_cache_info(info["breaks"][0]["resume"])["entries"] == 20
    model = DeepStackWithABranch(12).eval()
    compiled = kiln.compile(model)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):
            x = torch.randn(2, 8)
            assert_close(compiled(x), model(x))
    info = kiln.cache_info(compiled)
    assert info["graph_count"] == 13 and not info["runs_in_cpython"], info
    capsys.readouterr()


def comprehension_over_a_local(x, n):
    scale = 2.0  # a cell on 3.11: the comprehension is a closure over it
    ys = [x * scale for _ in range(n)]
    print("comprehension")
    return sum(ys) * scale


def closure_sees_a_rebinding_after_the_break(x):
    k = 3.0
    f = lambda t: t * k  # noqa: E731
    y = f(x)
    print("mid")
    k = 5.0  # the closure made before the break reads the new value
    return f(y) + k


def argument_that_is_a_cell(x, w):
    g = lambda: x * w  # noqa: E731
    print("argument cell")
    x = x + 1  # rebinds the cell g reads
    return g() + x


def nonlocal_counter_across_a_break(x):
    count = 0

    def bump(t):
        nonlocal count
        count += 1
        return t + count
    y = bump(x)
    print("counter")
    y = bump(y)
    return y, count


def recursive_local_function(x):
    def fact(n):
        return 1 if n <= 1 else n * fact(n - 1)
    print("recursive")
    return x * fact(4)


def test_breaks_in_functions_with_closure_cells(capsys):
    # A function whose locals closures read (comprehensions on 3.11,
    # lambdas, nested functions) breaks like any other: its cells go to the
    # resume function as the cell objects, so closures made before the
    # break and the code after it share them, writes included. The nested
    # functions passed on are guarded by their code, not their identity:
    # one entry serves every call.
    for fn, make_inputs in (
            (comprehension_over_a_local, lambda: (torch.randn(3), 3)),
            (closure_sees_a_rebinding_after_the_break, lambda: (torch.randn(3),)),
            (argument_that_is_a_cell, lambda: (torch.randn(3), torch.randn(3))),
            (nonlocal_counter_across_a_break, lambda: (torch.randn(3),)),
            (recursive_local_function, lambda: (torch.randn(3),))):
        compiled = check(fn, make_inputs, calls=4)
        info = assert_breaks(compiled, 1, 2)
        assert info["entries"] == 1 and info["hits"] == 3, info
        assert kiln.code_cache_info(info["breaks"][0]["resume"])["entries"] == 1
    capsys.readouterr()


def test_a_fresh_lambda_of_the_same_code_reuses_the_capture():
    def apply(f, x):
        return f(x) * 2

    compiled = kiln.compile(apply)
    for k in (1.0, 2.0, 2.0):
        f = lambda t: t + k  # noqa: E731  (a new function object each time)
        x = torch.randn(3)
        assert_close(compiled(f, x), apply(f, x))
    # The closure's value is guarded: k=1 and k=2 are two entries.
    assert kiln.cache_info(compiled)["entries"] == 2
