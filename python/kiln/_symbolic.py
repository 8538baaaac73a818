# Symbolic sizes during capture (dynamic shapes). A capture with dynamic
# dimensions traces on torch's fake tensors over a ShapeEnv: sizes are SymInts,
# torch's meta functions propagate them, and every decision Python code or a
# meta function takes on a size becomes a guard. kiln reads the results back as
# plain descriptions (nested tuples) that its C++ side turns into its own size
# expressions and relations.
import torch


class Unsupported(Exception):
    """A size expression kiln's expressions cannot hold."""


class SymbolicCapture:
    """The ShapeEnv and fake-tensor mode of one capture."""

    def __init__(self):
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        self.env = ShapeEnv()
        self.mode = FakeTensorMode(shape_env=self.env, allow_non_fake_inputs=False)

    def input(self, dtype, sizes, strides, offset, dynamic_dims):
        """A fake meta tensor with the given layout whose dims in
        `dynamic_dims` are symbolic (torch specialises sizes 0 and 1).
        Dims of equal size share a symbol (torch's duck sizing, as Dynamo
        does): q, k and v of one attention, a key/value cache's layers, are
        one length, which kernels and fusion then see as one expression; a
        call where they differ fails the guards and recompiles."""
        from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

        meta = _meta_tensor(dtype, sizes, strides, offset)
        dims = set(dynamic_dims)
        context = StatelessSymbolicContext(
            dynamic_sizes=[DimDynamic.DUCK if d in dims else DimDynamic.STATIC
                           for d in range(len(sizes))])
        return self.mode.from_tensor(meta, symbolic_context=context)

    def static(self, dtype, sizes, strides, offset):
        """A fake meta tensor with a layout that does not vary."""
        return self.mode.from_tensor(_meta_tensor(dtype, sizes, strides, offset),
                                     static_shapes=True)

    def guards(self):
        """The relations the capture relied on, each (op, lhs, rhs) with
        op one of == != < <= > >= and sides described as `describe` does."""
        import sympy

        ops = {sympy.Eq: "==", sympy.Ne: "!=", sympy.Lt: "<", sympy.Le: "<=",
               sympy.Gt: ">", sympy.Ge: ">=", sympy.StrictLessThan: "<",
               sympy.LessThan: "<=", sympy.StrictGreaterThan: ">",
               sympy.GreaterThan: ">="}
        from kiln import _logging

        relations = []
        for guard in self.env.guards:
            expr = guard.expr
            if expr is sympy.true:
                continue
            if (_logging.enabled("recompiles") and isinstance(expr, sympy.Eq)
                    and any(isinstance(side, sympy.Integer) for side in expr.args)):
                where = getattr(guard, "sloc", None) or getattr(guard, "stack", "")
                _logging.log("recompiles", f"size specialised: {expr} (at {where})")
            op = ops.get(type(expr))
            if op is None:
                raise Unsupported(f"a guard kiln cannot check: {expr}")
            relations.append((op, _describe_expr(expr.lhs), _describe_expr(expr.rhs)))
        return relations


def _meta_tensor(dtype, sizes, strides, offset):
    t = torch.empty_strided(sizes, strides, dtype=dtype, device="meta")
    if offset:
        t = t.as_strided(sizes, strides, offset)
    return t


def is_symbolic(value):
    """Whether `value` is a torch symbolic number (SymInt, SymFloat,
    SymBool)."""
    return isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool))


def contains_symbolic(value):
    """Whether `value`, or an item of it (tuples, lists, dicts), is a
    symbolic number."""
    if is_symbolic(value):
        return True
    if isinstance(value, (tuple, list)):
        return any(contains_symbolic(item) for item in value)
    if isinstance(value, dict):
        return any(contains_symbolic(item) for item in value.values())
    return False


def specialize(value):
    """`value` with its symbolic numbers replaced by their values (int(),
    float() and bool() on them add the guards that pin them), through
    tuples (torch.Size too), lists and dicts."""
    if isinstance(value, torch.SymInt):
        return int(value)
    if isinstance(value, torch.SymFloat):
        return float(value)
    if isinstance(value, torch.SymBool):
        return bool(value)
    if isinstance(value, torch.Size):
        return torch.Size(specialize(item) for item in value)
    if isinstance(value, (tuple, list)):
        items = [specialize(item) for item in value]
        return type(value)(items) if type(value) in (tuple, list) else type(value)(*items)
    if isinstance(value, dict):
        return type(value)((specialize(k), specialize(v)) for k, v in value.items())
    return value


def hint(value):
    """The example call's value of an int or SymInt."""
    if isinstance(value, torch.SymInt):
        if value.node.hint is None:
            raise Unsupported(f"size {value} has no value in the example (an unbacked SymInt)")
        return int(value.node.hint)
    return int(value)


def describe(value):
    """An int or SymInt as ("int", v), ("sym", name), or (op, operands...)
    with op one of add, mul, floordiv, mod, max."""
    if isinstance(value, torch.SymInt):
        return _describe_expr(value.node.expr)
    if isinstance(value, bool) or not isinstance(value, int):
        raise Unsupported(f"{type(value).__name__} where a size was expected")
    return ("int", value)


def _describe_expr(expr):
    import sympy
    from torch.utils._sympy import functions as fn

    if isinstance(expr, sympy.Integer) or (isinstance(expr, sympy.Number) and expr.is_integer):
        return ("int", int(expr))
    if isinstance(expr, sympy.Symbol):
        return ("sym", expr.name)
    if isinstance(expr, sympy.Add):
        return ("add",) + tuple(_describe_expr(a) for a in expr.args)
    if isinstance(expr, sympy.Mul):
        return ("mul",) + tuple(_describe_expr(a) for a in expr.args)
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and int(expr.exp) > 0:
        return ("mul",) + (_describe_expr(expr.base),) * int(expr.exp)
    if isinstance(expr, fn.FloorDiv):
        return ("floordiv", _describe_expr(expr.args[0]), _describe_expr(expr.args[1]))
    if isinstance(expr, (fn.PythonMod, fn.Mod, sympy.Mod)):
        return ("mod", _describe_expr(expr.args[0]), _describe_expr(expr.args[1]))
    max_types = tuple(t for t in (sympy.Max, getattr(fn, "Max", None)) if t is not None)
    min_types = tuple(t for t in (sympy.Min, getattr(fn, "Min", None)) if t is not None)
    if isinstance(expr, max_types):
        result = _describe_expr(expr.args[0])
        for arg in expr.args[1:]:
            result = ("max", result, _describe_expr(arg))
        return result
    if isinstance(expr, min_types):
        # min(a, b) == -max(-a, -b), exactly.
        def negated(described):
            return ("mul", ("int", -1), described)

        result = negated(_describe_expr(expr.args[0]))
        for arg in expr.args[1:]:
            result = ("max", result, negated(_describe_expr(arg)))
        return negated(result)
    raise Unsupported(f"size expression {expr} ({type(expr).__name__})")


def layout(tensor):
    """(hint sizes, hint strides, hint offset, described sizes, strides and
    offset) of a fake tensor; the descriptions are None where nothing in the
    layout is symbolic."""
    sizes, strides, offset = tensor.shape, tensor.stride(), tensor.storage_offset()
    hints = (tuple(hint(s) for s in sizes), tuple(hint(s) for s in strides), hint(offset))
    if not (contains_symbolic(tuple(sizes)) or contains_symbolic(tuple(strides))
            or is_symbolic(offset)):
        return hints + (None,)
    return hints + ((tuple(describe(s) for s in sizes), tuple(describe(s) for s in strides),
                     describe(offset)),)
