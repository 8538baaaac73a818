# Side effects on objects from outside the frame: attribute writes are
# captured, read back within the capture and replayed after the graph, in
# order, on the objects each call passes; what cannot be replayed faithfully
# runs in CPython and stays correct.
import io
import os
import types

import torch

import kiln
from frame_checks import check


class Box:
    def __init__(self, value=None):
        self.value = value


def test_a_write_to_a_global_object_is_replayed_every_call():
    state = Box()

    def fn(x):
        y = x * 2
        state.value = y          # a tensor leaves through the write
        state.count = 3
        return state.value + 1   # read back inside the capture

    compiled = kiln.compile(fn)
    for _ in range(3):
        x = torch.randn(4)
        state.value, state.count = None, 0
        result = compiled(x)
        torch.testing.assert_close(result, x * 2 + 1)
        torch.testing.assert_close(state.value, x * 2)
        assert state.count == 3
    info = kiln.cache_info(compiled)
    assert info["graph_count"] == 1 and info["entries"] == 1


def test_a_fresh_object_of_the_same_class_reuses_the_capture():
    def fn(x, box):
        box.value = x.sin()
        box.seen = True
        return x.cos()

    compiled = kiln.compile(fn)
    for _ in range(3):
        x, box = torch.randn(5), Box()
        torch.testing.assert_close(compiled(x, box), x.cos())
        torch.testing.assert_close(box.value, x.sin())
        assert box.seen is True
    assert kiln.cache_info(compiled)["entries"] == 1


def test_two_arguments_that_are_one_object_see_each_others_writes():
    def fn(x, a, b):
        a.value = x + 1
        return b.value * 2

    compiled = kiln.compile(fn)
    x = torch.randn(3)
    a, b = Box(), Box(torch.ones(3))
    torch.testing.assert_close(compiled(x, a, b), torch.ones(3) * 2)
    shared = Box(torch.zeros(3))
    torch.testing.assert_close(compiled(x, shared, shared), (x + 1) * 2)
    c, d = Box(), Box(torch.full((3,), 4.0))
    torch.testing.assert_close(compiled(x, c, d), torch.full((3,), 8.0))
    torch.testing.assert_close(c.value, x + 1)


def test_writes_happen_in_order_and_the_last_one_stays():
    def fn(x, box):
        box.value = 1
        box.value = x + box.value
        box.value = box.value * 3
        return box.value

    check(fn, lambda: (torch.randn(4), Box()), graphs=1)
    box = Box()
    x = torch.randn(2)
    kiln.compile(fn)(x, box)
    torch.testing.assert_close(box.value, (x + 1) * 3)


def test_a_write_before_a_graph_break_is_visible_to_the_code_after_it():
    out = io.StringIO()

    def fn(x, box):
        box.tag = "written"
        print(box.tag, file=out)   # runs in CPython after the first graph
        return x + 1

    compiled = kiln.compile(fn)
    box = Box()
    torch.testing.assert_close(compiled(torch.zeros(2), box), torch.ones(2))
    assert box.tag == "written" and out.getvalue() == "written\n"


def test_a_context_variable_pattern_sets_and_resets():
    # The shape of transformers' CompileableContextVar: set under a
    # compiler, read back, reset at the end.
    class Slot:
        def __init__(self):
            self.value, self.active = None, False

        def set(self, value):
            if torch.compiler.is_compiling():
                self.value, self.active = value, True
                return None
            self.value, self.active = value, True   # eager: a token
            return "token"

        def get(self):
            return self.value if self.active else None

        def reset(self, token):
            self.value, self.active = None, False

    slot = Slot()

    def fn(x):
        token = slot.set({"scale": 3})
        y = x * slot.get()["scale"]
        slot.reset(token)
        return y

    check(fn, lambda: (torch.randn(4),), graphs=1)
    assert slot.value is None and slot.active is False


def test_a_write_to_a_module_object_attribute():
    holder = types.ModuleType("holder")
    holder.calls = 0

    def fn(x):
        holder.last_shape = tuple(x.shape)
        return x.relu()

    check(fn, lambda: (torch.randn(2, 3),), graphs=1)
    assert holder.last_shape == (2, 3)


def test_nn_module_plain_attribute_write():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)
            self.mode = "a"

        def forward(self, x):
            self.mode = "b"
            return self.linear(x)

    net = Net()
    compiled = kiln.compile(net)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), net.linear(x))
    assert net.mode == "b"


def test_writes_that_cannot_be_modelled_stay_correct():
    class Custom:
        def __setattr__(self, name, value):
            object.__setattr__(self, name, value * 2)

    class WithProperty:
        def __init__(self):
            self._v = 0

        @property
        def v(self):
            return self._v

        @v.setter
        def v(self, value):
            self._v = value + 10

    def fn(x, a, b):
        a.v = 1
        b.v = 1
        return x + a.v + b.v

    compiled = kiln.compile(fn)
    x = torch.randn(3)
    a, b = Custom(), WithProperty()
    torch.testing.assert_close(compiled(x, a, b), x + 2 + 11)
    assert a.v == 2 and b.v == 11


def test_hasattr_and_getattr_default_follow_later_changes():
    def fn(x, box):
        if hasattr(box, "scale"):
            return x * box.scale
        return x + getattr(box, "offset", 100)

    compiled = kiln.compile(fn)
    box = Box()
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x, box), x + 100)
    box.offset = 5
    torch.testing.assert_close(compiled(x, box), x + 5)
    box.scale = 2
    torch.testing.assert_close(compiled(x, box), x * 2)
    del box.scale
    torch.testing.assert_close(compiled(x, box), x + 5)


def test_environment_reads_are_guarded():
    name = "KILN_TEST_SIDE_EFFECTS_FLAG"
    os.environ.pop(name, None)

    def fn(x):
        if os.environ.get(name, "0") == "1":
            return x + 1
        if name in os.environ:
            return x + int(os.environ[name])
        return x

    compiled = kiln.compile(fn)
    x = torch.randn(2)
    torch.testing.assert_close(compiled(x), x)
    os.environ[name] = "1"
    torch.testing.assert_close(compiled(x), x + 1)
    os.environ[name] = "7"
    torch.testing.assert_close(compiled(x), x + 7)
    del os.environ[name]
    torch.testing.assert_close(compiled(x), x)


def test_values_computed_from_constants():
    import inspect

    def fn(x, forward):
        n = len(inspect.signature(forward).parameters)
        low = torch.finfo(x.dtype).min
        return x.clamp(min=low) * n

    class Net(torch.nn.Module):
        def two(self, a, b):
            return a

        def forward(self, x):
            return fn(x, self.two)

    check(Net(), lambda: (torch.randn(3),), graphs=1)


def test_type_and_callable_and_all():
    def fn(x, box):
        kinds = (type(box).__name__, type(x) is torch.Tensor, callable(box),
                 callable(fn), all(callable(f) for f in (abs, len)),
                 any(isinstance(v, str) for v in (1, 2.0)))
        return x + 1, kinds

    check(fn, lambda: (torch.randn(2), Box()), graphs=1)


def test_parameters_keep_their_class():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(3))

        def forward(self, x):
            flags = (isinstance(self.weight, torch.nn.Parameter),
                     type(self.weight).__name__, isinstance(x, torch.nn.Parameter))
            return x * self.weight, flags

    net = Net()
    with torch.no_grad():
        check(net, lambda: (torch.randn(3),), graphs=1)


def test_super_methods_bind_to_each_calls_object():
    # super().__setitem__ on an object from outside: what runs after a break
    # must write into this call's object, never the one the capture saw.
    import collections

    class Record(collections.OrderedDict):
        def put(self, key, value):
            super().__setitem__(key, value)
            return len(self)

    def fn(x, record):
        return x + record.put("a", x * 2)

    compiled = kiln.compile(fn)
    for _ in range(3):
        x, record = torch.randn(3), Record()
        torch.testing.assert_close(compiled(x, record), x + 1)
        torch.testing.assert_close(record["a"], x * 2)


def test_a_module_with_its_own_call_is_inlined():
    class Checkpointed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)
            self.checkpointing = False

        def __call__(self, *args, **kwargs):
            if self.checkpointing and self.training:
                raise RuntimeError("not used here")
            return super().__call__(*args, **kwargs)

        def forward(self, x):
            return self.linear(x).relu()

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList(Checkpointed() for _ in range(2))

        def forward(self, x):
            for block in self.blocks:
                x = block(x) + x
            return x

    with torch.no_grad():
        check(Net().eval(), lambda: (torch.randn(2, 4),), graphs=1)


def test_an_object_the_function_returns_is_each_calls_object():
    # Returned as this call's object, not the capture's under an identity
    # guard that every new object would fail (a recompile per call).
    def fn(x, box):
        return box, x + 1

    compiled = kiln.compile(fn)
    for _ in range(3):
        box = Box()
        returned, y = compiled(torch.zeros(2), box)
        assert returned is box
        torch.testing.assert_close(y, torch.ones(2))
    assert kiln.cache_info(compiled)["entries"] == 1


LAST_RESULT = None
CALLS = 0


def _remember(y):
    global LAST_RESULT
    LAST_RESULT = y


def test_global_assignments_are_replayed_after_the_graph():
    def fn(x):
        global CALLS
        y = torch.relu(x) * 2
        _remember(y)  # a helper of this module assigns its global too
        CALLS = CALLS + 1  # read (and guarded), then written
        return y + LAST_RESULT, CALLS

    global CALLS, LAST_RESULT
    CALLS, LAST_RESULT = 0, None
    compiled = kiln.compile(fn)
    for call in range(1, 4):
        x = torch.randn(3)
        out, count = compiled(x)
        torch.testing.assert_close(out, torch.relu(x) * 4)
        assert count == call and CALLS == call
        torch.testing.assert_close(LAST_RESULT, torch.relu(x) * 2)
    info = kiln.cache_info(compiled)
    assert info["break_reasons"] == [] and not info["runs_in_cpython"]


def test_a_global_tensor_written_every_call_keeps_one_capture():
    def fn(x):
        global LAST_RESULT
        LAST_RESULT = x.sum(0)
        return x * 3

    compiled = kiln.compile(fn)
    for _ in range(3):
        x = torch.randn(4, 2)
        torch.testing.assert_close(compiled(x), x * 3)
        torch.testing.assert_close(LAST_RESULT, x.sum(0))
    assert kiln.cache_info(compiled)["entries"] == 1


def test_the_callers_lists_and_dicts_get_the_contents_the_frame_left():
    def fn(x, acc, table):
        y = x * 2
        acc.append(y)
        acc.extend([y + 1])
        first = acc.pop(0)
        acc.insert(0, first * 0)
        acc[1:2] = [y - 1]
        table["last"] = y
        table.pop("gone", None)
        return y + first, acc

    compiled = kiln.compile(fn)
    for _ in range(3):
        x = torch.randn(3)
        acc, acc_eager = [torch.ones(3)], [torch.ones(3)]
        table, table_eager = {"keep": 1, "gone": 2}, {"keep": 1, "gone": 2}
        out, returned = compiled(x, acc, table)
        expected, _ = fn(x, acc_eager, table_eager)
        torch.testing.assert_close(out, expected)
        assert returned is acc and len(acc) == len(acc_eager)
        for a, b in zip(acc, acc_eager):
            torch.testing.assert_close(a, b)
        assert list(table) == list(table_eager) == ["keep", "last"]
        torch.testing.assert_close(table["last"], table_eager["last"])
    info = kiln.cache_info(compiled)
    assert info["entries"] == 1 and not info["breaks"] and not info["runs_in_cpython"]


def test_one_list_under_two_names_is_not_changed_apart():
    def fn(a, b):
        a.append(1)
        return len(b)

    compiled = kiln.compile(fn)
    first, second = [], []
    assert compiled(first, second) == 0 and first == [1] and second == []
    shared = []
    assert compiled(shared, shared) == 1 and shared == [1]
