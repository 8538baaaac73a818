# The folders' include rules: frontend -> bridge -> runtime -> backend ->
# passes -> ir, and only the frontend and the bridge see Python. Reads the
# sources; depends on nothing in kiln.
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LAYERS = ["ir", "passes", "backend", "runtime", "bridge", "frontend"]
PYTHON_HEADERS = re.compile(r'#\s*include\s*[<"](Python\.h|pybind11/|frameobject\.h|internal/pycore)')
KILN_INCLUDE = re.compile(r'#\s*include\s*"([a-z]+)/')


def sources(folder):
    return sorted(p for p in (ROOT / folder).rglob("*") if p.suffix in (".h", ".cpp"))


@pytest.mark.parametrize("layer", LAYERS)
def test_includes_point_down(layer):
    allowed = set(LAYERS[: LAYERS.index(layer) + 1])
    wrong = []
    for path in sources(layer):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = KILN_INCLUDE.match(line.strip())
            if match and match.group(1) in LAYERS and match.group(1) not in allowed:
                wrong.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not wrong, f"{layer}/ may include only {sorted(allowed)}:\n" + "\n".join(wrong)


@pytest.mark.parametrize("layer", ["ir", "passes", "backend", "runtime"])
def test_core_and_runtime_have_no_python(layer):
    assert sources(layer), f"no sources under {layer}/"
    wrong = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sources(layer)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if PYTHON_HEADERS.match(line.strip())
    ]
    assert not wrong, f"{layer}/ must build without Python:\n" + "\n".join(wrong)
