# Test set-up shared by every Python test: makes the in-tree package
# importable even without the editable install, and seeds randomness.
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))


@pytest.fixture(autouse=True)
def _seed():
    import torch

    torch.manual_seed(0)
    yield
