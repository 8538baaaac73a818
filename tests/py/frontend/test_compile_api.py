# kiln.compile's argument handling, the torch.compile backend registration
# (on import and through the entry point), KILN_LOGS, and bad input of every
# kind: each raises a Python exception that says what is wrong; nothing
# crashes the interpreter.
import importlib.metadata
import os
import subprocess
import sys
import tomllib

import pytest
import torch
import torch._dynamo
from torch.testing import assert_close

import kiln
import kiln._C as _C
from kiln import _backend, _logging

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def double_relu(x):
    return torch.relu(x) * 2


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield


def test_package_exports():
    assert set(kiln.__all__) >= {"compile", "Unsupported", "__version__"}
    assert kiln.__version__ == "0.1.0"
    assert issubclass(kiln.Unsupported, RuntimeError)
    assert kiln.Unsupported is _C.Unsupported


def test_decorator_forms():
    @kiln.compile
    def plain(x):
        return torch.relu(x) * 2

    @kiln.compile(backend="eager", mode="max-autotune")
    def configured(x):
        return torch.relu(x) * 2

    @kiln.compile()
    def empty_call(x):
        return torch.relu(x) * 2

    x = torch.randn(5)
    for compiled in (plain, configured, empty_call, kiln.compile(double_relu, dynamic=False)):
        assert_close(compiled(x), double_relu(x))
    assert plain.__name__ == "plain"  # torch.compile keeps the function's name


def test_module_form_returns_a_module_like_wrapper():
    module = torch.nn.Linear(3, 2)
    compiled = kiln.compile(module, backend="eager")
    assert isinstance(compiled, kiln.CompiledModule)
    assert compiled.out_features == 2
    with torch.no_grad():
        x = torch.randn(4, 3)
        assert_close(compiled(x), module(x))


@pytest.mark.parametrize("target", [3, "fn", object(), [], torch.randn(2)])
def test_non_callable_targets_are_type_errors_naming_the_argument(target):
    with pytest.raises(TypeError, match="fn_or_module must be a function or an nn.Module"):
        kiln.compile(target)
    with pytest.raises(TypeError, match="fn_or_module"):
        kiln.compile(backend="eager")(target)


def test_unknown_keywords_and_extra_positionals_are_type_errors():
    with pytest.raises(TypeError, match="unexpected keyword argument 'options'"):
        kiln.compile(double_relu, options={})
    with pytest.raises(TypeError, match="unexpected keyword argument 'backnd'"):
        kiln.compile(backnd="eager")
    with pytest.raises(TypeError):
        kiln.compile(double_relu, True)


@pytest.mark.parametrize("backend", ["inductor", "LLVM", "", None, 3, double_relu])
def test_unknown_backends_are_value_errors_listing_the_valid_ones(backend):
    with pytest.raises(ValueError, match=r"unknown backend .*valid backends are 'llvm', 'eager'"):
        kiln.compile(double_relu, backend=backend)
    with pytest.raises(ValueError, match="valid backends"):
        kiln.compile(backend=backend)  # the decorator form checks at once


@pytest.mark.parametrize("mode", ["fast", "Default", None, 0])
def test_unknown_modes_are_value_errors(mode):
    with pytest.raises(
        ValueError, match=r"unknown mode .*'default', 'reduce-overhead', 'max-autotune'"
    ):
        kiln.compile(double_relu, mode=mode)


@pytest.mark.parametrize("fullgraph", [1, 0, "yes", None, [True]])
def test_fullgraph_must_be_a_bool(fullgraph):
    with pytest.raises(TypeError, match="fullgraph must be True or False"):
        kiln.compile(double_relu, fullgraph=fullgraph)


@pytest.mark.parametrize("dynamic", [1, 0, "auto", [], 1.0])
def test_dynamic_must_be_none_or_a_bool(dynamic):
    with pytest.raises(TypeError, match="dynamic must be None, True or False"):
        kiln.compile(double_relu, dynamic=dynamic)


def test_every_valid_option_is_accepted():
    for backend in ("llvm", "eager"):
        for mode in ("default", "reduce-overhead", "max-autotune"):
            for dynamic in (None, True, False):
                for fullgraph in (True, False):
                    kiln.compile(double_relu, backend=backend, mode=mode, dynamic=dynamic, fullgraph=fullgraph)


def test_torch_compile_finds_kiln_after_import():
    assert "kiln" in torch._dynamo.list_backends()
    compiled = torch.compile(double_relu, backend="kiln")
    x = torch.randn(6)
    before = _backend.counters["graphs"]
    assert_close(compiled(x), double_relu(x))
    assert _backend.counters["graphs"] == before + 1


def test_registering_again_is_harmless():
    _backend.register()
    _backend.register()
    assert "kiln" in torch._dynamo.list_backends()


def test_pyproject_declares_the_entry_point_torch_looks_for():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as file:
        project = tomllib.load(file)
    target = project["project"]["entry-points"]["torch_dynamo_backends"]["kiln"]
    module_name, attribute = target.split(":")
    assert getattr(__import__(module_name, fromlist=[attribute]), attribute) is _backend.kiln_backend
    assert project["tool"]["setuptools"]["package-dir"] == {"": "python"}
    assert "_C*.so" in project["tool"]["setuptools"]["package-data"]["kiln"]


def _installed():
    try:
        return any(ep.name == "kiln" for ep in importlib.metadata.entry_points(group="torch_dynamo_backends"))
    except Exception:
        return False


def run_python(code):
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd="/"
    )


@pytest.mark.skipif(not _installed(), reason="kiln is not pip-installed: no entry point to find")
def test_entry_point_works_without_importing_kiln():
    result = run_python(
        "import sys, torch\n"
        "f = torch.compile(lambda x: torch.relu(x) * 2, backend='kiln')\n"
        "x = torch.randn(4)\n"
        "torch.testing.assert_close(f(x), torch.relu(x) * 2)\n"
        "from kiln import _backend\n"
        "assert _backend.counters['graphs'] == 1, _backend.counters\n"
        "print('ok')\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.mark.skipif(not _installed(), reason="kiln is not pip-installed: no entry point to find")
def test_entry_point_and_import_together_register_once():
    result = run_python(
        "import torch, torch._dynamo\n"
        "torch._dynamo.list_backends()\n"  # torch reads the entry points first
        "import kiln\n"
        "f = torch.compile(lambda x: x + 1, backend='kiln')\n"
        "assert f(torch.zeros(2)).tolist() == [1.0, 1.0]\n"
        "print('ok')\n"
    )
    assert result.returncode == 0, result.stderr


def test_kiln_logs_graph_and_breaks(monkeypatch, capfd):
    monkeypatch.setenv("KILN_LOGS", "+graph, breaks")
    assert _logging.enabled("graph") and _logging.enabled("breaks") and not _logging.enabled("meta")
    x = torch.randn(3)
    kiln.compile(double_relu)(x)
    err = capfd.readouterr().err
    assert "[kiln:graph] captured double_relu" in err
    assert "= aten::relu(%x)" in err

    def prints(t):
        print("side effect")
        return t

    kiln.compile(prints)(x)
    err = capfd.readouterr().err
    assert "[kiln:breaks] " in err and "prints has a graph break at " in err
    assert "(CALL): print()" in err
    # Graphs that TorchDynamo hands to kiln's backend log the same way, with
    # their size symbols under dynamic=True.
    torch._dynamo.reset()
    torch.compile(double_relu, backend="kiln", dynamic=True)(x)
    err = capfd.readouterr().err
    assert "[kiln:graph] backend 'llvm', dynamic" in err and "f32[s0]" in err
    torch._dynamo.reset()


def test_kiln_dump_dir_writes_each_logged_stage(monkeypatch, capfd, tmp_path):
    # The directory is made where it is missing; each logged stage is a file.
    directory = tmp_path / "dumps" / "nested"
    monkeypatch.setenv("KILN_LOGS", "loop_ir,llvm,asm")
    monkeypatch.setenv("KILN_DUMP_DIR", str(directory))
    _C.clear_kernel_cache()  # so that the machine code is compiled, and logged
    kiln.compile(lambda x: torch.softmax(x * 3, -1))(torch.randn(4, 37))
    names = sorted(path.name.rsplit("-", 1)[0] for path in directory.iterdir())
    assert {"loop_ir", "llvm", "asm"} <= set(names)
    assert any("kernel" in path.read_text() for path in directory.glob("asm-*.txt"))
    monkeypatch.setenv("KILN_DUMP_DIR", "/proc/kiln-cannot-write-here")
    kiln.compile(lambda x: torch.softmax(x * 5, -1))(torch.randn(4, 37))
    assert "KILN_DUMP_DIR: cannot write" in capfd.readouterr().err


def test_kiln_logs_off_and_unknown_names(monkeypatch, capfd):
    monkeypatch.setenv("KILN_LOGS", "nonsense,,")
    kiln.compile(double_relu)(torch.randn(3))
    assert "[kiln" not in capfd.readouterr().err
    monkeypatch.setenv("KILN_LOGS", "all")
    assert all(_logging.enabled(name) for name in _logging.NAMES)


def test_bad_native_calls_raise_python_errors():
    with pytest.raises(AttributeError):
        _C.import_fx(42)
    with pytest.raises(TypeError):
        _C.EagerRunner(None)
    with pytest.raises(TypeError):
        _C.EagerRunner("graph")
    graph = _C.Graph()
    x = graph.add_input((torch.float32, [2]))
    graph.set_outputs([graph.add_op("aten::add.Tensor", x, x)])
    runner = _C.EagerRunner(graph)
    with pytest.raises(TypeError, match="takes 1 inputs, got 0"):
        runner()
    with pytest.raises(RuntimeError, match="kiln: aten::add.Tensor failed.*Expected a value of type .Tensor."):
        runner("not a tensor")
    with pytest.raises(TypeError):
        runner.run_boxed((torch.randn(2),))
    with pytest.raises(TypeError):
        graph.set_outputs(5)
    with pytest.raises(kiln.Unsupported, match="cannot represent the argument"):
        graph.set_outputs([object()])
    with pytest.raises(KeyError, match="kiln has no op"):
        _C.infer_meta("aten::no_such_op")


def test_nothing_crashes_the_interpreter():
    # The same abuse in a child process: it must end normally.
    result = run_python(
        f"import sys; sys.path.insert(0, {os.path.join(ROOT, 'python')!r})\n"
        "import torch, kiln, kiln._C as C\n"
        "calls = [lambda: C.import_fx(None), lambda: C.EagerRunner(C.Graph(), 'single'),\n"
        "         lambda: C.Graph().add_op('aten::add.Tensor'), lambda: C.Graph().add_input(None),\n"
        "         lambda: kiln.compile(1), lambda: kiln.compile(print, backend=1),\n"
        "         lambda: C.Graph().add_extern('', results=[]), lambda: C.parse_schema('a(')]\n"
        "for call in calls:\n"
        "    try:\n"
        "        call()\n"
        "    except Exception:\n"
        "        pass\n"
        "    else:\n"
        "        raise SystemExit(f'no error from {call}')\n"
        "print('survived')\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "survived"


def test_writes_through_views_in_aot_graphs_are_kernels():
    # aot_autograd's functional graphs write through views with
    # select_scatter and slice_scatter: kiln lowers them, no call into torch.
    def fn(x):
        y = x * 2
        y[:, 0] = 1.0
        y[1:, ::2] += 1
        y.diagonal().zero_()
        return y.sum(0), y
    runners = []
    original = _backend.compile_fx_graph

    def recording(gm, example_inputs, **options):
        compiled = original(gm, example_inputs, **options)
        runners.append(compiled.kiln_runner.describe())
        return compiled
    _backend.compile_fx_graph = recording
    try:
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend=_backend.make_dynamo_backend())
        x = torch.randn(8, 16)
        for a, e in zip(compiled(x), fn(x)):
            assert_close(a, e)
    finally:
        _backend.compile_fx_graph = original
    assert runners and all(" 0 extern" in runner for runner in runners), runners
