# Which frames the PEP 523 hook captures: user code and installed third-party
# packages (a transformers model is user code to kiln, as to Dynamo), not the
# standard library, torch or kiln; comprehension frames stay with their
# caller.
import importlib
import os
import sys
import sysconfig
import uuid

import pytest
import torch

import kiln
from kiln import _C


def test_third_party_packages_are_captured_the_standard_library_is_not():
    paths = sysconfig.get_paths()
    assert _C.hook_skips_file(os.__file__)
    assert _C.hook_skips_file(os.path.join(paths["stdlib"], "json", "decoder.py"))
    assert _C.hook_skips_file(torch.nn.functional.__file__)
    assert _C.hook_skips_file(kiln.__file__)
    assert _C.hook_skips_file("<frozen importlib._bootstrap>")
    for key in ("purelib", "platlib"):
        assert not _C.hook_skips_file(os.path.join(paths[key], "somepackage", "model.py"))
    assert not _C.hook_skips_file(__file__)


@pytest.fixture
def installed_module():
    """A module installed under site-packages for the test's duration."""
    folder = sysconfig.get_paths()["purelib"]
    if not os.access(folder, os.W_OK):
        pytest.skip(f"cannot write to {folder}")
    name = f"kiln_hook_scope_{uuid.uuid4().hex[:8]}"
    path = os.path.join(folder, name + ".py")
    with open(path, "w") as file:
        file.write("def block(x, w):\n    return torch.relu(x @ w) * 2 + 1\n\nimport torch\n")
    try:
        importlib.invalidate_caches()
        yield importlib.import_module(name)
    finally:
        sys.modules.pop(name, None)
        os.remove(path)


def test_a_function_of_an_installed_package_is_captured_when_its_caller_falls_back(installed_module):
    def forward(x, w):
        steps = iter([0])
        for _ in steps:  # no graph break where a local holds the loop's iterator: CPython
            print("a break", file=sys.stderr)
        return installed_module.block(x, w) - 1

    compiled = kiln.compile(forward)
    x, w = torch.randn(3, 4), torch.randn(4, 5)
    for _ in range(3):
        torch.testing.assert_close(compiled(x, w), forward(x, w))
    info = kiln.code_cache_info(installed_module.block)
    assert info is not None and info["entries"] == 1 and info["hits"] >= 2, info


def test_comprehensions_stay_with_their_caller(monkeypatch, capfd):
    monkeypatch.setenv("KILN_LOGS", "breaks")
    _C.reload_logging()

    def fn(xs):
        print("a break")
        rows = [x.sin() + 1 for x in xs]
        table = {i: x.cos() for i, x in enumerate(xs)}
        return torch.stack(rows) + torch.stack(list(table.values()))

    xs = [torch.randn(4) for _ in range(3)]
    torch.testing.assert_close(kiln.compile(fn)(xs), fn(xs))
    logged = capfd.readouterr().err
    assert "internal error" not in logged
    assert "<listcomp>" not in logged and "<dictcomp>" not in logged


def test_code_sees_that_it_is_being_compiled():
    # As under TorchDynamo: torch.compiler.is_compiling() is True in the
    # captured code (which then skips its eager-only checks), False outside.
    def fn(x):
        if torch.compiler.is_compiling() and not torch.jit.is_scripting():
            return x + 1
        return x - 1

    x = torch.zeros(3)
    assert torch.equal(kiln.compile(fn)(x), x + 1)
    assert torch.equal(fn(x), x - 1)
    assert not torch.compiler.is_compiling()
