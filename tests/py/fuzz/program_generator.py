# A seeded generator of random tensor programs as Python source, and their
# differential check: kiln.compile(program) against eager PyTorch on the same
# inputs (random shapes with 0 and 1 sizes, transposed, strided and expanded
# layouts, every dtype kiln lowers, special values), comparing values (NaN
# positions, infinities, signed zeros of exact ops), dtypes, shapes, strides
# and aliasing. A failing program shrinks to a minimal reproducer.
# Depends on torch and kiln.
import dataclasses
import math
import random

import torch

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int32, torch.int64, torch.uint8]
DTYPES = FLOATS + INTS + [torch.bool]
SIZES = [0, 1, 1, 2, 3, 4, 5, 8, 17, 33]

# Each op: (template, kinds of operand, family). "{0}" and "{1}" are operand
# variables; "{d}" a dim of the first operand, "{s}" a Python number.
UNARY_FLOAT = ["torch.exp({0})", "torch.log({0})", "torch.log1p({0})", "torch.sqrt({0})",
               "torch.rsqrt({0})", "torch.tanh({0})", "torch.sigmoid({0})", "torch.erf({0})",
               "torch.sin({0})", "torch.cos({0})", "torch.expm1({0})", "torch.reciprocal({0})",
               "torch.floor({0})", "torch.ceil({0})", "torch.round({0})", "torch.trunc({0})",
               "torch.nn.functional.gelu({0})", "torch.nn.functional.silu({0})",
               "torch.nn.functional.softplus({0})", "torch.atan({0})", "torch.sign({0})",
               "{0} ** 2", "{0} ** 0.5", "{0} ** 3", "{0} ** -1", "{0} ** 1.5",
               "torch.nan_to_num({0})", "torch.isnan({0})", "torch.isinf({0})"]
UNARY_ANY = ["torch.abs({0})", "-{0}", "torch.relu({0})", "{0}.clone()", "{0} + {s}",
             "{0} * {s}", "{0} - {s}", "{0} / {s}", "{s} / {0}", "{0} > {s}", "{0} == {s}",
             "torch.clamp({0}, -1, 2)", "torch.where({0} > 0, {0}, {s})",
             "{0}.to(torch.float32)", "{0}.to(torch.float16)", "{0}.to(torch.int64)",
             "{0}.to(torch.bool)", "{0}.to(torch.bfloat16)", "{0}.to(torch.float64)"]
UNARY_INT = ["{0} // {si}", "{0} % {si}", "{0} & 3", "{0} | 5", "{0} ^ 6", "~{0}", "{0} << 1"]
BINARY = ["{0} + {1}", "{0} - {1}", "{0} * {1}", "{0} / {1}", "torch.maximum({0}, {1})",
          "torch.minimum({0}, {1})", "{0} < {1}", "{0} != {1}", "torch.where({0} > {1}, {0}, {1})"]
BINARY_FLOAT = ["torch.atan2({0}, {1})", "{0} ** {1}", "torch.fmod({0}, {1})",
                "torch.remainder({0}, {1})", "{0} // {1}"]
BINARY_BOOL = ["{0} & {1}", "{0} | {1}", "{0} ^ {1}", "torch.logical_and({0}, {1})"]
REDUCTIONS = ["{0}.sum({d})", "{0}.sum()", "{0}.mean({d})", "{0}.amax({d})", "{0}.amin({d})",
              "{0}.prod({d})", "{0}.var({d})", "{0}.std({d}, keepdim=True)",
              "{0}.argmax({d})", "{0}.argmin({d})", "torch.logsumexp({0}, {d})",
              "{0}.sum({d}, keepdim=True)", "{0}.any({d})", "{0}.all()", "{0}.nansum({d})",
              "torch.linalg.vector_norm({0}, dim={d})", "{0}.max({d}).values",
              "{0}.cumsum({d})"]
ROWS = ["torch.softmax({0}, {d})", "torch.log_softmax({0}, {d})",
        "torch.nn.functional.layer_norm({0}, {0}.shape[-1:])",
        "torch.nn.functional.normalize({0}, dim={d})"]
VIEWS = ["{0}.transpose(0, -1)", "{0}.permute(*reversed(range({0}.dim())))", "{0}[..., ::2]",
         "{0}.narrow({d}, 0, max({0}.shape[{d}] // 2, 0))", "{0}.reshape(-1)", "{0}.flatten()",
         "{0}.unsqueeze(0)", "{0}.squeeze()", "{0}[...]", "{0}.detach()", "{0}.t() if {0}.dim() == 2 else {0}",
         "{0}.expand(2, *{0}.shape)", "{0}.contiguous()", "{0}.flip({d})", "{0}[1:]"]
JOINS = ["torch.cat([{0}, {1}], {d})", "torch.stack([{0}, {1}])"]
MATMUL = ["{0} @ {1}.mT", "torch.bmm({0}.unsqueeze(0), {1}.mT.unsqueeze(0))",
          "torch.nn.functional.linear({0}, {1})"]

FAMILIES = {
    "unary_float": UNARY_FLOAT, "unary_any": UNARY_ANY, "unary_int": UNARY_INT,
    "binary": BINARY, "binary_float": BINARY_FLOAT, "binary_bool": BINARY_BOOL,
    "reduction": REDUCTIONS, "row": ROWS, "view": VIEWS, "join": JOINS, "matmul": MATMUL,
}


@dataclasses.dataclass
class Program:
    seed: int
    source: str
    inputs: list  # (dtype, sizes, layout, values-kind) descriptions, for printing
    make_inputs: object  # () -> list of tensors, fresh each call
    families: set

    def function(self):
        namespace = {"torch": torch}
        exec(compile(self.source, f"<fuzz program {self.seed}>", "exec"), namespace)
        return namespace["program"]


ORDER_DEPENDENT = {"reduction", "row", "matmul"}


def _special_values(dtype, huge=True):
    if dtype.is_floating_point:
        info = torch.finfo(dtype)
        values = [math.inf, -math.inf, math.nan, -0.0, 0.0,
                  info.tiny / 2 if dtype != torch.float16 else 1e-7,
                  1e-30 if dtype in (torch.float32, torch.float64, torch.bfloat16) else 1e-4]
        return values + ([info.max / 4, -info.max / 4] if huge else [])
    if dtype == torch.bool:
        return [True, False]
    info = torch.iinfo(dtype)
    return [0, 1, -1 if info.min < 0 else 2, info.max, info.min]


def _make_tensor(rng, generator, dtype, sizes, layout, special, huge=True):
    # Values: normal floats, small ints, bools; then some special values.
    base_sizes = list(sizes)
    if layout == "transposed" and len(sizes) >= 2:
        base_sizes = base_sizes[::-1]
    elif layout == "strided" and len(sizes) >= 1:
        base_sizes[-1] = base_sizes[-1] * 2
    elif layout == "expanded" and len(sizes) >= 1:
        base_sizes[0] = 1
    if dtype.is_floating_point:
        t = torch.randn(base_sizes, generator=generator, dtype=torch.float64) * 3
    elif dtype == torch.bool:
        t = torch.rand(base_sizes, generator=generator) > 0.5
    else:
        low = 0 if dtype == torch.uint8 else -20
        t = torch.randint(low, 20, base_sizes, generator=generator, dtype=torch.int64)
    t = t.to(dtype)
    if special and t.numel():
        flat = t.view(-1)
        values = _special_values(dtype, huge)
        for value in rng.sample(values, k=min(3, len(values))):
            flat[rng.randrange(flat.numel())] = value
    if layout == "transposed" and len(sizes) >= 2:
        t = t.transpose(0, -1)
    elif layout == "strided" and len(sizes) >= 1:
        t = t[..., ::2]
    elif layout == "expanded" and len(sizes) >= 1:
        t = t.expand(*sizes)
    return t


def _pick_template(rng, families, dtype, other_dtype):
    choices = []
    for family in families:
        if family == "unary_float" and not dtype.is_floating_point:
            continue
        if family == "unary_int" and (dtype.is_floating_point or dtype == torch.bool):
            continue
        if family == "binary_float" and not dtype.is_floating_point:
            continue
        if family == "binary_bool" and not (dtype == torch.bool or not dtype.is_floating_point):
            continue
        if family in ("row", "matmul") and not dtype.is_floating_point:
            continue
        choices.extend((family, template) for template in FAMILIES[family])
    return rng.choice(choices)


def _number(rng, dtype):
    if dtype.is_floating_point:
        return rng.choice(["2.5", "-0.5", "1e-5", "1e6", "3", "0.0", "float('inf')", "-7"])
    return rng.choice(["2", "-3", "7", "0", "1"])


def generate(seed, families=None, length=None, special=None):
    """A random program of `length` ops over the named families (all when
    None), with 1 or 2 inputs."""
    rng = random.Random(seed)
    families = sorted(families or FAMILIES)
    length = length or rng.randint(1, 6)
    special = rng.random() < 0.5 if special is None else special
    dtype = rng.choice(DTYPES)
    rank = rng.randint(0, 3)
    sizes = [rng.choice(SIZES) for _ in range(rank)]
    count = rng.choice([1, 2])
    descriptions = []
    for _ in range(count):
        layout = rng.choice(["contiguous", "contiguous", "transposed", "strided", "expanded"])
        input_dtype = dtype if rng.random() < 0.8 else rng.choice(DTYPES)
        descriptions.append((input_dtype, list(sizes), layout))
    names = [f"x{i}" for i in range(count)]

    def make_inputs():
        generator = torch.Generator().manual_seed(seed)
        value_rng = random.Random(seed + 1)
        return [_make_tensor(value_rng, generator, d, s, layout, special)
                for d, s, layout in descriptions]

    # Track metadata by running each candidate line on meta-free real inputs
    # (cheap at these sizes): a line that raises in eager is not kept.
    env = {"torch": torch}
    for name, tensor in zip(names, make_inputs()):
        env[name] = tensor
    lines, variables, used = [], list(names), set()
    attempts = 0
    while len(lines) < length and attempts < length * 20:
        attempts += 1
        first = rng.choice(variables)
        second = rng.choice(variables)
        value = env[first]
        if not isinstance(value, torch.Tensor):
            continue
        family, template = _pick_template(rng, families, value.dtype, env[second].dtype)
        dim = rng.randrange(-value.dim(), value.dim()) if value.dim() else 0
        if "{d}" in template and value.dim() == 0 and family not in ("view",):
            continue
        expression = template.format(first, second, d=dim, s=_number(rng, value.dtype),
                                     si=rng.choice(["2", "3", "-4"]))
        target = f"v{len(lines)}"
        try:
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = eval(expression, env)
        except Exception:  # noqa: BLE001 - eager refuses it: try another op
            continue
        if not isinstance(result, torch.Tensor) or result.numel() > 100000:
            continue
        env[target] = result
        lines.append(f"    {target} = {expression}  # {family}")
        variables.append(target)
        used.update({first, second} & set(variables))
    if not lines:
        lines.append(f"    v0 = {names[0]}.clone()  # unary_any")
        variables.append("v0")
    outputs = [v for v in variables[count:] if v not in used][-2:] or [variables[-1]]
    if rng.random() < 0.2:
        outputs.append(rng.choice(variables))  # sometimes an input or an intermediate
    source = (f"def program({', '.join(names)}):\n" + "\n".join(lines) +
              f"\n    return ({', '.join(outputs)},)\n")
    used_families = {line.rsplit("# ", 1)[1] for line in lines}
    if used_families & ORDER_DEPENDENT:
        # Sums of terms near the dtype's maximum overflow in some orders and
        # not in others: which one eager's kernel picks is no rule to hold
        # kiln to. Such programs get every special value but those.
        def make_inputs():
            generator = torch.Generator().manual_seed(seed)
            value_rng = random.Random(seed + 1)
            return [_make_tensor(value_rng, generator, d, s, layout, special, huge=False)
                    for d, s, layout in descriptions]
    return Program(seed, source, descriptions, make_inputs, used_families)


# ----------------------------------------------------------------- checking

def _tolerance(dtype):
    return {torch.float16: (2e-2, 2e-3), torch.bfloat16: (5e-2, 2e-2),
            torch.float32: (2e-4, 2e-5), torch.float64: (1e-7, 1e-9)}.get(dtype, (0, 0))


# Floating dtypes from the least precise: a program computes no more exactly
# than its least precise input or cast (integers promote to float32).
_PRECISION_ORDER = [torch.bfloat16, torch.float16, torch.float32, torch.float64]


def _precision(program):
    """The least precise floating dtype a program's values pass through."""
    dtypes = {d if d.is_floating_point else torch.float32 for d, _, _ in program.inputs}
    for dtype in _PRECISION_ORDER:
        if f"torch.{str(dtype)[6:]}" in program.source:
            dtypes.add(dtype)
    return min(dtypes, key=_PRECISION_ORDER.index)


def _values_mismatch(expected, actual, precision=None):
    """A description of how `actual`'s values differ from `expected`'s, or
    None; floats within the tolerance of the less precise of their dtype and
    `precision`."""
    if expected.dtype != actual.dtype:
        return f"dtype {actual.dtype}, eager {expected.dtype}"
    if expected.shape != actual.shape:
        return f"shape {tuple(actual.shape)}, eager {tuple(expected.shape)}"
    if expected.numel() == 0:
        return None
    if not expected.dtype.is_floating_point:
        if not torch.equal(expected, actual):
            return f"values {actual.flatten()[:8].tolist()}, eager {expected.flatten()[:8].tolist()}"
        return None
    e, a = expected.double(), actual.double()
    if not torch.equal(e.isnan(), a.isnan()):
        return f"NaN positions differ: {a.flatten()[:8].tolist()}, eager {e.flatten()[:8].tolist()}"
    infinite = e.isinf() | a.isinf()
    if not torch.equal(e[infinite], a[infinite]):
        return f"infinities differ: {a[infinite][:8].tolist()}, eager {e[infinite][:8].tolist()}"
    finite = e.isfinite() & a.isfinite()
    dtype = expected.dtype
    if precision is not None and _PRECISION_ORDER.index(precision) < _PRECISION_ORDER.index(dtype):
        dtype = precision
    rtol, atol = _tolerance(dtype)
    close = torch.isclose(a[finite], e[finite], rtol=rtol, atol=atol)
    if not bool(close.all()):
        bad = (~close).nonzero()[0].item()
        return (f"values differ: {a[finite][bad].item()!r}, eager {e[finite][bad].item()!r} "
                f"(rtol {rtol}, atol {atol})")
    return None


def _dense_strides_differ(expected, actual):
    for size, es, as_ in zip(expected.shape, expected.stride(), actual.stride()):
        if size > 1 and es != as_:
            return True
    return False


def _float64_reference(fn, program):
    """The program's outputs on its inputs widened to float64 (None where it
    cannot run so)."""
    inputs = [t.double() if t.dtype.is_floating_point else t for t in program.make_inputs()]
    # Casts to a float dtype cast to float64 instead, and integer inputs
    # promote to float64 (x1 / x0 of ints: the default dtype), so that
    # eager's own float32 and half kernels are never the reference: torch's
    # AVX-512 gelu(inf) is NaN in float32 and bfloat16, inf in float64; a
    # float32 vector_norm of [1e-30] underflows to 0.
    source = program.source
    for name in ("float16", "bfloat16", "float32"):
        source = source.replace(f"torch.{name}", "torch.float64")
    namespace = {"torch": torch}
    exec(compile(source, f"<fuzz program {program.seed}, float64>", "exec"), namespace)
    fn = namespace["program"]
    default = torch.get_default_dtype()
    try:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.set_default_dtype(torch.float64)
            return fn(*inputs)
    except Exception:  # noqa: BLE001
        return None
    finally:
        torch.set_default_dtype(default)


def _rounded_reference(fn, program):
    """The program's outputs where every ATen op is correctly rounded: each
    op runs on its float operands widened to float64 and its float results
    round to the dtypes eager's op gives (None where it cannot run so). An
    ideal eager: where eager's own op is an ulp off (a bfloat16 logsumexp,
    a float16 gelu) and a later op amplifies it (cancellation in a matmul,
    a cast to int), kiln's correctly rounded op is not a wrong answer."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

    def widen(value):
        if isinstance(value, torch.Tensor) and value.dtype.is_floating_point:
            return value.double()
        return value

    # Casts and in-place ops keep eager's meaning; everything else is an op
    # as the program wrote it (torch.logsumexp, F.gelu, **, @), intercepted
    # where the program calls it: the ops it is made of run inside, unseen.
    casts = {"to", "type", "double", "float", "half", "bfloat16", "int", "long", "bool"}

    class RoundedPerOp(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            low = func(*args, **kwargs)
            name = getattr(func, "__name__", "")
            lows, spec = tree_flatten(low)
            if name in casts or name.endswith("_") or not any(
                    isinstance(l, torch.Tensor) and l.dtype.is_floating_point for l in lows):
                return low
            try:
                wide = func(*tree_map(widen, args), **tree_map(widen, kwargs))
            except Exception:  # noqa: BLE001 - an op without float64: eager's
                return low
            wides, wide_spec = tree_flatten(wide)
            if spec != wide_spec:
                return low
            return tree_unflatten([
                w.to(l.dtype) if isinstance(l, torch.Tensor) and isinstance(w, torch.Tensor)
                and l.dtype.is_floating_point and w.shape == l.shape else l
                for l, w in zip(lows, wides)], spec)

    inputs = program.make_inputs()  # outside the mode: its ops are not the program's
    try:
        import warnings
        with warnings.catch_warnings(), RoundedPerOp():
            warnings.simplefilter("ignore")
            return fn(*inputs)
    except Exception:  # noqa: BLE001
        return None


def _elementwise_close(x, y, dtype):
    """Per element: x and y agree (NaN with NaN, the same infinity, or
    within `dtype`'s tolerance)."""
    x, y = x.double(), y.double()
    rtol, atol = _tolerance(dtype)
    both_nan = x.isnan() & y.isnan()
    same_infinity = x.isinf() & (x == y)
    finite = x.isfinite() & y.isfinite()
    close = torch.zeros_like(finite)
    close[finite] = torch.isclose(x[finite], y[finite], rtol=rtol, atol=atol)
    return both_nan | same_infinity | close


def _eagers_inconsistency(expected, actual, reference):
    """Whether every element where kiln differs from eager is one where
    kiln gives the float64 answer, or where eager itself is off it."""
    if reference is None or reference.shape != expected.shape:
        return False
    reference = reference.to(expected.dtype)  # rounded as the program's result
    differ = ~_elementwise_close(expected, actual, expected.dtype)
    kiln_right = _elementwise_close(reference, actual, expected.dtype)
    eager_off = ~_elementwise_close(reference, expected, expected.dtype)
    return bool((~differ | kiln_right | eager_off).all())


def check(program, compile_fn):
    """Runs `program` eagerly and through `compile_fn(function)`; returns None
    when they agree, else a description of the first difference."""
    fn = program.function()
    inputs = program.make_inputs()
    try:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = fn(*inputs)
    except Exception as error:  # noqa: BLE001
        expected = error
    kiln_inputs = program.make_inputs()
    try:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            actual = compile_fn(fn)(*kiln_inputs)
    except Exception as error:  # noqa: BLE001
        if isinstance(expected, Exception):
            return None  # both raise
        return f"kiln raised {type(error).__name__}: {str(error)[:300]}"
    if isinstance(expected, Exception):
        return f"eager raised {type(expected).__name__}: {str(expected)[:200]}, kiln did not"
    reference = None
    precision = _precision(program)
    for index, (e, a) in enumerate(zip(expected, actual)):
        problem = _values_mismatch(e, a, precision)
        if problem and e.dtype == a.dtype and e.shape == a.shape:
            # Where eager is off its own float64 answer (half precision,
            # overflow in an intermediate), kiln must give that answer, or
            # that of the program with every op correctly rounded; for
            # integer and bool outputs, exactly where kiln differs.
            if reference is None:
                reference = (_float64_reference(fn, program), _rounded_reference(fn, program))
            for answers in reference:
                if answers is not None and (
                        _eagers_inconsistency(e, a, answers[index]) if e.dtype.is_floating_point
                        else answers[index].shape == a.shape
                        and bool(((e == a) | (answers[index].to(a.dtype) == a)).all())):
                    problem = None
        if problem:
            return f"output {index}: {problem}"
        if e.numel() > 1 and _dense_strides_differ(e, a):
            return f"output {index}: strides {a.stride()}, eager {e.stride()}"
        # Aliasing: the same object, and storage shared with an input, as eager.
        for which, (ei, ai) in enumerate(zip(inputs, kiln_inputs)):
            if (e is ei) != (a is ai):
                return f"output {index}: `is` input {which}: kiln {a is ai}, eager {e is ei}"
            shares = e.numel() and ei.numel() and \
                e.untyped_storage().data_ptr() == ei.untyped_storage().data_ptr()
            kiln_shares = a.numel() and ai.numel() and \
                a.untyped_storage().data_ptr() == ai.untyped_storage().data_ptr()
            if bool(shares) != bool(kiln_shares):
                return f"output {index}: shares input {which}'s storage: kiln {bool(kiln_shares)}, eager {bool(shares)}"
    return None


def shrink(program, compile_fn):
    """The smallest program found by deleting ops and outputs that still
    fails the same way (by the first word of its description)."""
    failure = check(program, compile_fn)
    if failure is None:
        return program, None
    kind = failure.split(":")[0]
    current = program
    changed = True
    while changed:
        changed = False
        lines = current.source.splitlines()
        body = [i for i, line in enumerate(lines) if line.startswith("    v")]
        for index in reversed(body):
            target = lines[index].split("=")[0].strip()
            rest = lines[:index] + lines[index + 1:]
            # Return what the deleted line read instead, where possible.
            ret = rest[-1]
            if target in ret:
                continue
            candidate = dataclasses.replace(current, source="\n".join(rest) + "\n")
            try:
                outcome = check(candidate, compile_fn)
            except Exception:  # noqa: BLE001
                continue
            if outcome and outcome.split(":")[0] == kind:
                current, failure, changed = candidate, outcome, True
                break
        if not changed:
            lines = current.source.splitlines()
            outputs = lines[-1].strip()[len("return ("):-2].split(", ")
            if len(outputs) > 1:
                for keep in outputs:
                    source = "\n".join(lines[:-1]) + f"\n    return ({keep},)\n"
                    candidate = dataclasses.replace(current, source=source)
                    outcome = check(candidate, compile_fn)
                    if outcome:
                        current, failure, changed = candidate, outcome, True
                        break
    return current, failure


def reproducer(program, failure):
    """A standalone script that shows the failure."""
    return (f"# fuzz seed {program.seed}: {failure}\n"
            f"import torch, kiln\n"
            f"import sys; sys.path.insert(0, 'tests/py')\n"
            f"from fuzz.program_generator import generate\n"
            f"# inputs (dtype, sizes, layout): {program.inputs}\n"
            f"{program.source}"
            f"inputs = generate({program.seed}).make_inputs()\n"
            f"print(program(*inputs))\n"
            f"print(kiln.compile(program)(*generate({program.seed}).make_inputs()))\n")
