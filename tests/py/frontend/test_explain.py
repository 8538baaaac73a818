# kiln.explain: a call's graphs with op counts, each place Python ran instead
# with its reason and source line, the guards, and a printable report.
import torch

import kiln


def helper(x):
    return x.cos() * 2


def with_a_print(x):
    y = x.sin() + 1
    print("side effect")  # the break
    return helper(y)


def test_explain_a_whole_graph():
    def fn(x, w):
        return torch.relu(x @ w) + 1

    x, w = torch.randn(2, 3), torch.randn(3, 4)
    out = kiln.explain(fn, x, w)
    assert out.graph_count == 1 and out.break_count == 0
    assert out.op_count == 3
    assert "aten::mm" in out.graphs[0].text
    assert out.graphs[0].function.endswith("fn")
    assert "L['x'] tensor f32[2, 3]" in out.guards[0]
    torch.testing.assert_close(out.result, fn(x, w))
    report = str(out)
    assert "Graph Count: 1" in report and "Graph Break Count: 0" in report and "Op Count: 3" in report


def test_explain_names_each_break_with_its_line(capsys):
    x = torch.randn(3)
    out = kiln.explain(with_a_print, x)
    assert capsys.readouterr().out == "side effect\n"  # the call ran once
    assert out.break_count == 1
    item = out.breaks[0]
    assert item.function == "with_a_print" and item.graph_break and not item.runs_in_cpython
    assert "print" in item.reason and item.instruction == "CALL"
    assert item.location == f"{__file__}:{with_a_print.__code__.co_firstlineno + 2}"
    assert item.where.startswith(__file__ + ":") and "in with_a_print" in item.where
    # The graph before the break, and the resume function's graph after it
    # (the helper inlined there).
    assert [graph.function for graph in out.graphs] == [
        "with_a_print", f"with_a_print.<resume after line {with_a_print.__code__.co_firstlineno + 2}>"]
    assert "aten::cos" in out.graphs[1].text
    torch.testing.assert_close(out.result, with_a_print(x))
    capsys.readouterr()
    assert f"1. with_a_print has a graph break at {item.location} (CALL): print()" in str(out)


def in_cpython(x):
    y = x.sin() + 1
    steps = iter([0])
    for _ in steps:
        print("side effect")  # the loop's iterator is a local too: no graph break
    return helper(y)


def test_explain_names_a_function_that_runs_in_cpython(capsys):
    x = torch.randn(3)
    out = kiln.explain(in_cpython, x)
    assert out.break_count == 1
    item = out.breaks[0]
    assert item.function == "in_cpython" and item.runs_in_cpython and not item.graph_break
    assert "print" in item.reason and "no graph break: a loop's iterator that a local also holds" in item.reason
    assert item.where.startswith(__file__ + ":") and "in in_cpython" in item.where
    # The helper it calls is captured on its own.
    assert [graph.function for graph in out.graphs] == ["helper"]
    torch.testing.assert_close(out.result, in_cpython(x))
    capsys.readouterr()
    assert "1. in_cpython runs in CPython: print()" in str(out)


def test_explain_does_not_need_kiln_logs(monkeypatch, capfd):
    monkeypatch.delenv("KILN_LOGS", raising=False)
    out = kiln.explain(lambda x: x * 2, torch.randn(2))
    assert out.graph_count == 1
    assert "[kiln:" not in capfd.readouterr().err
