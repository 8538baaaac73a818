# Objects the captured code builds: instances of Python classes (plain,
# dataclasses, dict subclasses like transformers' ModelOutput) and sets.
# They are modelled during capture and rebuilt after the graph where they
# leave it; each case is compared with eager on fresh inputs.
import collections
import dataclasses
import io
from typing import Optional

import torch

import kiln
from frame_checks import check


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    @property
    def norm(self):
        return (self.x * self.x + self.y * self.y).sqrt()

    def scaled(self, k):
        return Point(self.x * k, self.y * k)

    @classmethod
    def origin_like(cls, t):
        return cls(t * 0, t * 0)

    @staticmethod
    def add(a, b):
        return a + b


def test_a_plain_class_with_methods_and_a_property():
    def fn(a, b):
        p = Point(a, b).scaled(2)
        q = Point.origin_like(a)
        return p.norm + Point.add(q.x, 1), p

    check(fn, lambda: (torch.randn(3), torch.randn(3)), graphs=1)


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    hidden: Optional[torch.Tensor] = None
    steps: int = 0


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: torch.Tensor
    b: float = 1.5


def test_dataclasses_plain_and_frozen():
    def fn(x):
        out = Output(x.relu(), steps=2)
        out.hidden = out.logits * 2
        frozen = Frozen(x + 1)
        return out, frozen, frozen.b, dataclasses.fields(out)[0].name

    check(fn, lambda: (torch.randn(4),), graphs=1)


class Record(collections.OrderedDict):
    """The shape of transformers' ModelOutput: a dict whose fields are also
    attributes, written through super()."""

    def __init__(self, **kwargs):
        super().__init__()
        for key, value in kwargs.items():
            setattr(self, key, value)

    def __setattr__(self, name, value):
        if value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def __getitem__(self, key):
        if isinstance(key, str):
            return dict(self.items())[key]
        return self.to_tuple()[key]

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


def test_a_dict_subclass_with_fields_as_attributes():
    def fn(x):
        record = Record(first=x * 2, skipped=None, second=x + 1)
        record["third"] = x.sum()
        return (record, record.first, record["second"], record[0],
                record.to_tuple(), list(record.keys()), len(record),
                "third" in record, record.skipped)

    check(fn, lambda: (torch.randn(3),), graphs=1)


def test_instances_compare_by_identity():
    def fn(x):
        a, b = Point(x, x), Point(x, x)
        c = a
        return x + 1, a is b, a is c, a is not None, isinstance(a, Point)

    check(fn, lambda: (torch.randn(2),), graphs=1)


class Lazy:
    def __init__(self, base):
        self.base = base

    def __getattr__(self, name):
        return self.base * len(name)


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a):
        self.a = a
        self.b = a * 2


def test_getattr_hook_and_slots():
    def fn(x):
        lazy = Lazy(x)
        slotted = Slotted(x)
        return lazy.abc, slotted.b, hasattr(lazy, "base")

    check(fn, lambda: (torch.randn(3),), graphs=1)


def test_an_instance_stored_on_an_outside_object():
    class Holder:
        pass

    holder = Holder()

    def fn(x):
        holder.point = Point(x, x + 1)
        return x * 2

    compiled = kiln.compile(fn)
    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), x * 2)
        assert type(holder.point) is Point
        torch.testing.assert_close(holder.point.y, x + 1)


def test_an_instance_live_at_a_graph_break():
    out = io.StringIO()

    def fn(x):
        p = Point(x + 1, x + 2)
        print("break", file=out)
        return p.x * p.y, type(p).__name__

    check(fn, lambda: (torch.randn(3),))


def test_sets_of_constants():
    def fn(x, names):
        seen = {n.upper() for n in names}
        seen.add("Z")
        seen.discard("A")
        extra = set(("Q", "Z")) | seen
        return (x + len(seen), "B" in seen, sorted(seen), sorted(extra),
                [n for n in seen], seen.issubset(extra))

    check(fn, lambda: (torch.randn(2), ["a", "b", "c", "b"]), graphs=1)


def test_classes_kiln_does_not_model_stay_correct():
    class WithNew:
        def __new__(cls, value):
            instance = super().__new__(cls)
            instance.value = value * 3
            return instance

    class Failure(Exception):
        pass

    def fn(x):
        made = WithNew(x)
        error = Failure("message")
        return made.value + 1, str(error)

    check(fn, lambda: (torch.randn(3),))


def test_module_list_slices_keep_their_modules():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(4))
            self.depth = 3

        def forward(self, x):
            for layer in self.layers[: self.depth]:
                x = layer(x).relu()
            return x

    net = Net()
    with torch.no_grad():
        check(net, lambda: (torch.randn(2, 4),), graphs=1)


def test_a_module_with_parameters_built_in_the_frame_is_refused():
    # Its parameters are initialised at random on every eager call: it is
    # no constant of the graph. Its construction is a graph break.
    def fn(x):
        scale = torch.nn.Softmax(dim=-1)  # stateless: a constant module
        layer = torch.nn.Linear(3, 3)
        return scale(x), layer(x).shape

    compiled = kiln.compile(fn)
    x = torch.randn(2, 3)
    out, shape = compiled(x)
    torch.testing.assert_close(out, torch.softmax(x, -1))
    assert shape == (2, 3)
    reasons = kiln.cache_info(compiled)["break_reasons"]
    assert len(reasons) == 1 and "owns parameters or buffers" in reasons[0]


SHIFT = 1.0


def classes_defined_in_the_frame(x):
    class Scaler:
        factor = 3.0

        def __init__(self, t):
            self.t = t

        @property
        def scaled(self):
            return self.t * self.factor

        @staticmethod
        def twice(t):
            return t * 2

        @classmethod
        def make(cls, t):
            return cls(t + SHIFT)  # a global the class reads when called

        def __add__(self, other):
            return Scaler(self.t + other.t)

        def __len__(self):
            return 2

    class Shifted(Scaler):
        def __init__(self, t):
            super().__init__(t)
            self.t = self.t - 1

    a = Scaler.make(x) + Scaler(x)
    b = Shifted(x)
    return a.scaled + Scaler.twice(b.t) * len(a), isinstance(b, Scaler)


def class_body_reads_a_global(x):
    class Config:
        shift = SHIFT * 2
    return x + Config.shift


def class_body_reads_a_local(x, k):
    class Config:
        shift = k  # a closure over the frame's local
    return x + Config.shift


def test_classes_defined_in_the_frame_are_made_at_capture():
    # A class statement runs its body once, at capture; every call of the
    # capture uses that class (a Python class statement would make a new
    # one each call: the one observable difference).
    info = check(classes_defined_in_the_frame, lambda: (torch.randn(3),), graphs=1)
    assert info["entries"] == 1 and info["hits"] == 2
    global SHIFT
    compiled = kiln.compile(class_body_reads_a_global)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x + 2.0)
    try:
        SHIFT = 5.0  # the body's global is guarded: a new capture
        torch.testing.assert_close(compiled(x), x + 10.0)
    finally:
        SHIFT = 1.0
    assert kiln.cache_info(compiled)["entries"] == 2
    # A class that closes over a constant local is made with it (guarded as
    # the argument it came from); over a tensor, the class statement is a
    # graph break (its cell passed on to the resume function).
    info = check(class_body_reads_a_local, lambda: (torch.randn(3), 2.0), graphs=1)
    info = check(class_body_reads_a_local, lambda: (torch.randn(3), torch.randn(3)))
    assert not info["runs_in_cpython"] and "(a closure)" in info["break_reasons"][0]
