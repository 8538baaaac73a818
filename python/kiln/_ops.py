# kiln's own graph ops that are not ATen operators, as the eager runner calls
# them (an Extern or Op node named kiln::<name> runs kiln._ops.<name>).
import functools

import torch


def set_grad_enabled(enabled):
    """Switches autograd recording inside a graph (`with torch.no_grad()`)."""
    torch._C._set_grad_enabled(enabled)


def _writes_out(schema):
    return any(a.kwarg_only and a.alias_info is not None and a.alias_info.is_write
               for a in schema.arguments)


def _accepts(schema, positional, keywords):
    """Whether a call with `positional` arguments and the named keyword
    arguments could bind to `schema`, types aside."""
    formal = [a for a in schema.arguments if not a.kwarg_only]
    if positional > len(formal):
        return False
    if any(a.default_value is None and not a.type.kind() == "OptionalType"
           for a in formal[positional:]):
        return False
    names = {a.name for a in schema.arguments if a.kwarg_only}
    if not set(keywords) <= names:
        return False
    return all(a.name in keywords or a.default_value is not None
               or a.type.kind() == "OptionalType"
               for a in schema.arguments if a.kwarg_only)


# Looked up for every node a graph runs through torch: the same few ops
# recur in every layer of a model.
@functools.lru_cache(maxsize=4096)
def generated_binding(name, overload, positional, keywords):
    """torch's generated Python binding for a call of `aten::<name>.<overload>`
    with `positional` arguments and the named keyword ones, where that call
    can only mean that overload; else None.

    The binding (`torch.addmm`, `Tensor.t`) parses its arguments in C++ and
    costs about half of the boxed call of the `OpOverload`. Its parser
    chooses among the overloads of the name by the arguments' Python types,
    so it is taken only where no other overload (but those writing to
    `out=`, which a call without `out` never selects) accepts as many
    arguments under the same keywords. Its positional arguments follow the
    schema's order, and keyword-only ones keep their schema names.
    """
    packet = getattr(torch.ops.aten, name, None)
    if packet is None or overload not in packet.overloads():
        return None
    schema = getattr(packet, overload)._schema
    if schema.is_mutable:
        return None
    for other in packet.overloads():
        rival = getattr(packet, other)._schema
        if other != overload and not _writes_out(rival) and _accepts(
                rival, positional, keywords):
            return None
    binding = getattr(torch._C._VariableFunctions, name, None)
    if binding is not None:
        return binding
    arguments = schema.arguments
    if (arguments and arguments[0].name == "self"
            and name in torch._C.TensorBase.__dict__):
        return getattr(torch._C.TensorBase, name)
    return None
