# kiln's meta functions against torch on the ATen calls that PyTorch's own op
# test database (op_db) makes: each sample input runs in eager mode under a
# dispatch mode that records every ATen call; each call of an op in kiln's
# registry is compared with kiln's meta function.
import collections

import pytest
import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import kiln._C as _C
import meta_check

DTYPES = (torch.float32, torch.float64, torch.int64, torch.bool, torch.bfloat16)


def snapshot(tensor):
    """A view with the tensor's current sizes, strides and offset."""
    if tensor.layout != torch.strided:
        return tensor
    return tensor.as_strided(tensor.shape, tensor.stride(), tensor.storage_offset())


class Recorder(TorchDispatchMode):
    def __init__(self, names):
        super().__init__()
        self.names = names
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.name() in self.names or func.name() + ".default" in self.names:
            # Later in-place ops (matmul's squeeze_) may restride these
            # tensors: keep views with the metadata they have now.
            self.calls.append((func.name(), *pytree.tree_map_only(torch.Tensor, snapshot, (args, kwargs, out))))
        return out


def registered():
    names = set(_C.op_names())
    return names | {n + ".default" for n in names if "." not in n.split("::")[1]}


def op_db_entries():
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def collect_calls():
    names = set(_C.op_names())
    families = {n.split("::")[1].split(".")[0] for n in names}
    calls = []
    for info in op_db_entries():
        base = (info.aten_name or info.name).split(".")[0]
        if base not in families and info.name.split(".")[-1] not in families:
            continue
        for dtype in DTYPES:
            if dtype not in info.supported_dtypes("cpu"):
                continue
            try:
                samples = list(info.sample_inputs("cpu", dtype, requires_grad=False))
            except Exception:
                continue
            for sample in samples[:8]:
                recorder = Recorder(names)
                try:
                    with recorder:
                        info.op(sample.input, *sample.args, **sample.kwargs)
                except Exception:
                    continue
                calls.extend(recorder.calls)
    return calls


@pytest.fixture(scope="module")
def calls():
    return collect_calls()


def test_meta_matches_torch_on_op_db_samples(calls):
    failures = []
    checked = collections.Counter()
    for name, args, kwargs, out in calls:
        try:
            meta_check.compare(name, out, args, kwargs)
            checked[name] += 1
        except AssertionError as error:
            failures.append(str(error))
        except Exception as error:  # kiln refused a call torch accepted
            failures.append(f"{name} {meta_check.describe(args, kwargs)}: {type(error).__name__}: {error}")
    print(f"\nop_db meta cases checked: {sum(checked.values())} over {len(checked)} ops")
    assert not failures, f"{len(failures)} mismatches, first ones:\n" + "\n".join(failures[:15])
    assert sum(checked.values()) >= 1
