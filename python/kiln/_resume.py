# Graph breaks: the code objects a break runs through. The continuation B
# restores a frame's locals and stack, runs the one instruction kiln could
# not capture and calls the resume function R: the original code with a
# prologue that restores the locals and stack and jumps to the instruction
# after the break. B is the original code too, entered at the break: the
# instruction runs under the try and with blocks around it, whose handlers
# (an __exit__, an except clause) see an exception it raises as eager's would.
# Called once per capture from frontend/CodeCache.cpp, never per call.
# Depends on the running interpreter's dis and opcode tables (3.11, 3.12).
import dis
import opcode
import sys
import types
import weakref

__all__ = ["refusal", "continuation", "base_of", "make_function", "GRAD_MODE_EXITS"]

_OP = opcode.opmap
_CACHES = opcode._inline_cache_entries
_PY311 = sys.version_info[:2] == (3, 11)
_CO_VARARGS = 0x04
_CO_VARKEYWORDS = 0x08
_CO_GENERATOR_LIKE = 0x20 | 0x80 | 0x100 | 0x200


def _call_effect(arg):
    return arg + 2, 1  # [NULL or self, callable, *args] -> result


def _call_ex_effect(arg):
    return 3 + (arg & 1), 1  # [NULL, callable, args, kwargs?] -> result


# The instructions a break may stop at, with (popped, pushed) for their
# argument. Every pushed item is an object (never NULL); what an instruction
# leaves below its operands keeps its kind. LOAD_ATTR's method form pushes a
# NULL or not depending on the object: it is not here.
_BREAKABLE = {
    "CALL": _call_effect,
    "CALL_FUNCTION_EX": _call_ex_effect,
    "BINARY_OP": lambda arg: (2, 1),
    "BINARY_SUBSCR": lambda arg: (2, 1),
    "COMPARE_OP": lambda arg: (2, 1),
    "CONTAINS_OP": lambda arg: (2, 1),
    "UNARY_NEGATIVE": lambda arg: (1, 1),
    "UNARY_INVERT": lambda arg: (1, 1),
    "UNARY_NOT": lambda arg: (1, 1),
    "STORE_ATTR": lambda arg: (2, 0),
    "STORE_SUBSCR": lambda arg: (3, 0),
    "DELETE_SUBSCR": lambda arg: (2, 0),
    "STORE_GLOBAL": lambda arg: (1, 0),
    "BUILD_STRING": lambda arg: (arg, 1),
    "FORMAT_VALUE": lambda arg: (2 if arg & 4 else 1, 1),
}
if _PY311:
    _BREAKABLE["LOAD_ATTR"] = lambda arg: (1, 1)
else:
    _BREAKABLE["LOAD_ATTR"] = lambda arg: (1, 1) if not arg & 1 else None
# Instructions that set up a CALL and run with it: 3.11's KW_NAMES and
# PRECALL, 3.12's KW_NAMES.
_CALL_PREFIX = {"KW_NAMES", "PRECALL"}

# Conditional jumps a break may stop at (a tensor's truth deciding the
# branch): the forward jump of the same sense that the continuation's
# prologue runs in their place, and whether the jump keeps its operand
# (3.11's `a or b` in value context).
_CONDITIONAL = {}
for _sense in ("FALSE", "TRUE"):
    if _PY311:
        for _direction in ("FORWARD", "BACKWARD"):
            _CONDITIONAL[f"POP_JUMP_{_direction}_IF_{_sense}"] = (
                f"POP_JUMP_FORWARD_IF_{_sense}", False)
        _CONDITIONAL[f"JUMP_IF_{_sense}_OR_POP"] = (f"JUMP_IF_{_sense}_OR_POP", True)
    else:
        _CONDITIONAL[f"POP_JUMP_IF_{_sense}"] = (f"POP_JUMP_IF_{_sense}", False)
for _name in _CONDITIONAL:
    _BREAKABLE[_name] = lambda arg: (1, 0)

# Resume code objects: (base code, offset, layout) -> R's code, so that a
# recompile finds the code (and the frame hook's cache on it) it made before.
_resume_codes = weakref.WeakKeyDictionary()
# R's code -> (a weak reference to the code it was made from, the prologue's
# length in bytes): a break inside R is a break of the original code. Weak,
# as the original code holds R through _resume_codes.
_bases = weakref.WeakKeyDictionary()


class _GradModeExit:
    """The __exit__ of a torch.no_grad/enable_grad block that a graph break
    left open: sets grad mode back to what it was before the block."""

    __slots__ = ("enabled",)

    def __init__(self, enabled):
        self.enabled = enabled

    def __call__(self, *exc_info):
        import torch

        torch._C._set_grad_enabled(self.enabled)
        return False

    def __repr__(self):
        return f"<kiln: leave a grad-mode block, grad enabled={self.enabled}>"


#: By the grad mode they restore (False, True); the capture of a resume
#: function reads them back as the blocks' exits.
GRAD_MODE_EXITS = (_GradModeExit(False), _GradModeExit(True))


def base_of(code, offset):
    """The original code object and offset of `offset` in `code`, which may
    be a resume function's code."""
    while code in _bases:
        base, prologue = _bases[code]
        if base() is None:  # gone: R stands on its own
            break
        code, offset = base(), offset - prologue
    return code, offset


def _instructions(code):
    return list(dis.get_instructions(code))


def _at(instructions, offset):
    for index, instruction in enumerate(instructions):
        if instruction.offset == offset:
            return index
    raise ValueError(f"no instruction at offset {offset}")


def refusal(code, offset):
    """Why a graph break at the instruction at `offset` of `code` cannot be
    made (a message), or None when it can."""
    code, offset = base_of(code, offset)
    if offset < 0:
        return "the instruction is in a resume function's prologue"
    if code.co_flags & _CO_GENERATOR_LIKE:
        return "a generator or coroutine frame"
    instructions = _instructions(code)
    instruction = instructions[_at(instructions, offset)]
    effect = _BREAKABLE.get(instruction.opname)
    if effect is None or effect(instruction.arg or 0) is None:
        return f"kiln cannot resume after a {instruction.opname} instruction"
    if instruction.opname in _CONDITIONAL and _inside_handler(code, offset):
        # Inside a try or with block the jump runs in the body, under the
        # handlers bool() may raise into, and both sides are overwritten by
        # jumps back to their trampolines: those may not overlap.
        index = _at(instructions, offset)
        windows = sorted([(offset, instructions[index + 1].offset)] + [
            (start, start + _LONGEST_BACKWARD_JUMP)
            for start in (instructions[index + 1].offset, instruction.argval)])
        if any(a[1] > b[0] for a, b in zip(windows, windows[1:])):
            return "the two sides of a branch inside a try or with block are too close"
    return None


# Bytes of the longest JUMP_BACKWARD a continuation writes (three
# EXTENDED_ARGs, the jump and its cache entries).
_LONGEST_BACKWARD_JUMP = 2 * (4 + _CACHES[_OP["JUMP_BACKWARD"]])


def _inside_handler(code, offset):
    return any(entry.start <= offset < entry.end
               for entry in dis._parse_exception_table(code))


def _emit(code_bytes, name, arg=0):
    """Appends one instruction (with EXTENDED_ARG prefixes and zeroed cache
    entries) to a bytearray."""
    op = _OP[name]
    for shift in (24, 16, 8):
        if arg >> shift:
            code_bytes += bytes([_OP["EXTENDED_ARG"], (arg >> shift) & 0xFF])
    code_bytes += bytes([op, arg & 0xFF])
    code_bytes += bytes(2 * _CACHES[op])


def _emit_frame_start(code_bytes, code):
    """What a frame of `code` runs first: its closure's cells into its free
    variables (a nested function's), then RESUME."""
    if code.co_freevars:
        _emit(code_bytes, "COPY_FREE_VARS", len(code.co_freevars))
    _emit(code_bytes, "RESUME", 0)


def _emit_call(code_bytes, count):
    if _PY311:
        _emit(code_bytes, "PRECALL", count)
    _emit(code_bytes, "CALL", count)


def _varint_le(value):
    out = bytearray()
    while value >= 64:
        out.append(64 | (value & 63))
        value >>= 6
    out.append(value)
    return out


def _line_entries(units, line_delta):
    """Location-table entries (no columns) covering `units` code units: the
    first moves the line by `line_delta`, the rest stay on that line."""
    out = bytearray()
    delta = line_delta
    while units > 0:
        length = min(units, 8)
        out.append(0x80 | (13 << 3) | (length - 1))
        out += _varint_le((-delta << 1) | 1 if delta < 0 else delta << 1)
        delta = 0
        units -= length
    return out


def _varint_be(value, start):
    chunks = [value & 63]
    value >>= 6
    while value:
        chunks.append(value & 63)
        value >>= 6
    chunks.reverse()
    out = bytearray(chunk | 64 for chunk in chunks)
    out[-1] &= ~64
    if start:
        out[0] |= 128
    return out


def _shifted_exception_table(code, units):
    out = bytearray()
    for entry in dis._parse_exception_table(code):
        out += _varint_be(entry.start // 2 + units, True)
        out += _varint_be((entry.end - entry.start) // 2, False)
        out += _varint_be(entry.target // 2 + units, False)
        out += _varint_be((entry.depth << 1) | int(entry.lasti), False)
    return bytes(out)


def _stack_after(code, offset, stack_nulls):
    """The break instruction, the instructions replayed with it, the next
    instruction's offset, which items of the stack after it are NULL, and
    how many items below the instruction's operands it leaves alone."""
    instructions = _instructions(code)
    index = _at(instructions, offset)
    instruction = instructions[index]
    popped, pushed = _BREAKABLE[instruction.opname](instruction.arg or 0)
    prefix = []
    while index - len(prefix) > 0 and instructions[index - len(prefix) - 1].opname in _CALL_PREFIX:
        prefix.insert(0, instructions[index - len(prefix) - 1])
    # 3.11 counts part of a call's effect on its PRECALL.
    expected = sum(dis.stack_effect(item.opcode, item.arg, jump=False)
                   for item in prefix + [instruction])
    if pushed - popped != expected or popped > len(stack_nulls):
        raise ValueError(f"stack effect of {instruction.opname} does not match")
    kept = len(stack_nulls) - popped
    after = tuple(stack_nulls[:kept]) + (False,) * pushed
    return instruction, prefix, instructions[index + 1].offset, after, kept


# Instructions whose argument indexes the cells and free variables, which
# sit after the plain locals: more locals move them.
_CELL_OPS = {_OP[name] for name in ("LOAD_DEREF", "STORE_DEREF", "DELETE_DEREF",
                                     "LOAD_CLOSURE", "MAKE_CELL", "LOAD_CLASSDEREF",
                                     "LOAD_FROM_DICT_OR_DEREF") if name in _OP}


def _cell_slots(code, plain=None):
    """The slots of `code`'s cell variables (co_cellvars order) among its
    locals: an argument that is a cell keeps its own slot; the others
    follow the `plain` locals (co_varnames, or more appended to them)."""
    slots, after = [], len(code.co_varnames) if plain is None else plain
    for name in code.co_cellvars:
        if name in code.co_varnames:
            slots.append(code.co_varnames.index(name))
        else:
            slots.append(after)
            after += 1
    return slots


def _shift_cell_indices(code, added):
    """`code`'s bytecode with the indices of its cell and free variables
    that follow the plain locals moved by `added` (locals appended before
    them); an argument that is a cell keeps its slot."""
    raw = bytearray(code.co_code)
    if not added or not (code.co_cellvars or code.co_freevars):
        return bytes(raw)
    for instruction in dis.get_instructions(code):
        if instruction.opcode not in _CELL_OPS or instruction.arg < len(code.co_varnames):
            continue
        start = instruction.offset
        if start >= 2 and raw[start - 2] == _OP["EXTENDED_ARG"]:
            raise ValueError("a cell index with EXTENDED_ARG")
        if raw[start + 1] + added > 255:
            raise ValueError("too many locals before the cells")
        raw[start + 1] += added
    return bytes(raw)


# How a loop's iterator on the stack leaves a graph break (the frontend's
# GraphBreak::Iterated): the items still to come as a tuple, or a state
# iterator_at makes it again from.
_AS_TUPLE, _AS_STATE = 1, 2


def iterator_at(state):
    """The iterator of a loop that a graph break left as `state`:
    ("list", the list, the position reached) is the list's own iterator
    there, so the rest of the loop reads the list as it is then (and as it
    changes), as eager's loop does; ("tuple", the items still to come);
    ("enumerate", a state, the next count); ("zip", the states of its
    iterators); ("reversed", the list, the index of the next item)."""
    how = state[0]
    if how == "list":
        iterator = iter(state[1])
        for _ in range(state[2]):
            next(iterator, None)
        return iterator
    if how == "enumerate":
        return enumerate(iterator_at(state[1]), state[2])
    if how == "zip":
        return zip(*[iterator_at(part) for part in state[1]])
    if how == "reversed":
        items = state[1]
        iterator = reversed(items)
        # A reversed list iterator gives the item at its index while the
        # list is that long, and stops for good at the first that is not.
        if state[2] >= len(items):
            return iter(())
        for _ in range(len(items) - 1 - state[2]):
            next(iterator, None)
        return iterator
    return iter(state[1])


def make_function(code, globals_, kwdefaults, count, parts):
    """A function that a frame defined (MAKE_FUNCTION), made again after a
    graph break: `parts` is its `count` positional defaults, then the cells
    of its closure."""
    defaults, cells = tuple(parts[:count]), tuple(parts[count:])
    function = types.FunctionType(code, globals_, code.co_name, defaults or None,
                                  cells or None)
    function.__kwdefaults__ = kwdefaults
    return function


def _resume_code(code, offset, next_offset, bound, after, line, iterated=()):
    # Code objects compare equal across files: the file is part of the key.
    key = (code.co_filename, offset, next_offset, bound, after, iterated)
    per_code = _resume_codes.setdefault(code, {})
    if key in per_code:
        return per_code[key]
    count = len(code.co_varnames)
    temps = tuple(f"__kiln_stack{j}" for j, null in enumerate(after) if not null)
    # The frame's cells come as arguments after the stack (the cell
    # objects: closures made before the break share them) and go into
    # their slots, as the skipped MAKE_CELLs would have made them.
    cells = tuple(f"__kiln_cell{j}" for j in range(len(code.co_cellvars)))
    varnames = code.co_varnames + temps + cells
    consts = code.co_consts
    if _AS_STATE in iterated:
        consts = consts + (iterator_at,)
    prologue = bytearray()
    _emit_frame_start(prologue, code)
    _emit_restore(prologue, bound, after, iterated, len(code.co_consts))
    for j, slot in enumerate(_cell_slots(code, len(varnames))):
        _emit(prologue, "LOAD_FAST", count + len(temps) + j)
        _emit(prologue, "STORE_FAST", slot)
    for slot in range(count, len(varnames)):
        _emit(prologue, "DELETE_FAST", slot)
    # It lands on the body's `next_offset`, measured from after the jump,
    # where the body starts.
    prologue += _fixed_jump("JUMP_FORWARD", next_offset // 2)
    units = len(prologue) // 2
    resumed = code.replace(
        co_code=bytes(prologue) + _shift_cell_indices(code, len(temps) + len(cells)),
        co_linetable=bytes(_line_entries(units, 0)) + code.co_linetable,
        co_exceptiontable=_shifted_exception_table(code, units),
        co_varnames=varnames,
        co_nlocals=len(varnames),
        co_argcount=len(varnames),
        co_posonlyargcount=0,
        co_kwonlyargcount=0,
        co_flags=code.co_flags & ~(_CO_VARARGS | _CO_VARKEYWORDS),
        co_consts=consts,
        # A list iterator is made by a call: NULL, the function, its state.
        co_stacksize=max(code.co_stacksize, len(after)) + 3,
        co_qualname=f"{code.co_qualname}.<resume after line {line}>",
    )
    _bases[resumed] = (weakref.ref(code), len(prologue))
    per_code[key] = resumed
    return resumed


def _emit_restore(code_bytes, bound, nulls, iterated=(), list_iterator_index=None):
    """Unbinds the locals `bound` marks unbound and pushes the stack: a NULL
    where `nulls` says so, else the next temporary after the locals, and
    a loop's iterator where `iterated` marks one: an iterator over the
    tuple of the items still to come, or iterator_at (the constant at
    `list_iterator_index`) of the state the break left."""
    for slot, is_bound in enumerate(bound):
        if not is_bound:
            _emit(code_bytes, "DELETE_FAST", slot)
    temp = len(bound)
    for index, null in enumerate(nulls):
        how = iterated[index] if index < len(iterated) else 0
        if null:
            _emit(code_bytes, "PUSH_NULL")
        elif how == _AS_STATE:
            _emit(code_bytes, "PUSH_NULL")
            _emit(code_bytes, "LOAD_CONST", list_iterator_index)
            _emit(code_bytes, "LOAD_FAST", temp)
            _emit_call(code_bytes, 1)
            temp += 1
        else:
            _emit(code_bytes, "LOAD_FAST", temp)
            temp += 1
            if how == _AS_TUPLE:
                _emit(code_bytes, "GET_ITER")


def _fixed_jump(name, distance):
    """A jump whose length (four code units) does not depend on its
    distance."""
    out = bytearray()
    for shift in (24, 16, 8):
        out += bytes([_OP["EXTENDED_ARG"], (distance >> shift) & 0xFF])
    out += bytes([_OP[name], distance & 0xFF])
    out += bytes(2 * _CACHES[_OP[name]])
    return out


def _backward_jump(end, target):
    """The shortest JUMP_BACKWARD that, placed so that it ends at code unit
    `end` plus its own length, lands on code unit `target`."""
    caches = _CACHES[_OP["JUMP_BACKWARD"]]
    for units in range(1 + caches, 5 + caches):  # 0 to 3 EXTENDED_ARGs
        out = bytearray()
        _emit(out, "JUMP_BACKWARD", end + units - target)
        if len(out) // 2 == units:
            return out
    raise ValueError("a function too long to resume in")


def continuation(code, offset, bound, stack_nulls, globals_, closure=None, grad_mode=None,
                 iterated=()):
    """The function a cache hit calls after its graph, with the frame's
    locals (None where `bound` says a local is unbound) and its stack
    items (those `stack_nulls` does not mark NULL) as arguments: it sets
    grad mode to `grad_mode` (unless None), runs the instruction at `offset`
    in CPython and returns what the resume function returns. A stack item
    `iterated` marks is a loop's iterator, passed as a tuple of the items
    still to come (or, for one that reads a list as it goes, as a state
    iterator_at makes it again from): the instruction leaves it alone (it lies below the
    instruction's operands) and the resume function iterates it. Returns
    (function, the resume codes, how many locals the function takes: those
    of the original code, the slots of the frame's locals whose cells it
    takes after the stack items). A conditional jump has two resume codes:
    the instruction after it, then its target. A nested
    function's continuation is made with `closure`, the frame's closure; a
    cache hit makes it again with its own frame's.

    Its code is the original code behind a prologue: [frame start, a jump
    over the trampolines] [a trampoline per resume code: the stack after
    the instruction into temporaries, then R called with the locals and
    those] [restore the locals and stack, set grad mode, jump to the
    instruction]. The instruction after the break (and a conditional
    jump's target) is overwritten by a jump back to its trampoline; the
    rest of the original code runs only where an exception of the
    instruction is handled by a try or with block. Outside those, a
    conditional jump is not run in the body: the restore ends with a
    forward jump of the same sense onto a jump back to the target's
    trampoline, after a jump back to the next instruction's."""
    # The frame's cells that are not arguments sit after its plain locals
    # (a resume function's temporaries among them): their cells are passed
    # after the stack items, from these slots of the frame's locals.
    frame_plain = len(code.co_varnames)
    cell_locals = tuple(slot for slot in _cell_slots(code) if slot >= frame_plain)
    code, offset = base_of(code, offset)
    count = len(code.co_varnames)
    if any(bound[count:frame_plain]):
        raise ValueError("a resume function's stack temporary is live")
    bound = tuple(bound[:count])
    stack_nulls = tuple(stack_nulls)
    instruction, prefix, next_offset, after, kept = _stack_after(code, offset, stack_nulls)
    iterated = tuple(int(flag) for flag in iterated)
    if any(iterated[kept:]):
        raise ValueError(f"a loop's iterator is an operand of {instruction.opname}")
    iterated = iterated[:kept] if any(iterated) else ()
    line = instruction.positions.lineno if instruction.positions else None
    line = line or code.co_firstlineno
    # Where the frame goes on after the instruction, with its stack there.
    successors = [(next_offset, after)]
    conditional = _CONDITIONAL.get(instruction.opname)
    if conditional:
        successors.append((instruction.argval, stack_nulls if conditional[1] else after))
    resumes = tuple(_resume_code(code, offset, target, bound, stack, line, iterated)
                    for target, stack in successors)

    inputs = tuple(f"__kiln_in{j}" for j, null in enumerate(stack_nulls) if not null)
    inputs += tuple(f"__kiln_cellin{j}" for j in range(len(cell_locals)))
    most = max(sum(not null for null in stack) for _, stack in successors)
    outputs = tuple(f"__kiln_out{j}" for j in range(most))
    varnames = code.co_varnames + inputs + outputs + ("__kiln_null",)
    cell_slots = _cell_slots(code, len(varnames))
    arg_cells = {slot for slot in cell_slots if slot < count}
    # A nested function's B makes R from its own closure on every call (B is
    # made per call with the frame's closure); otherwise R is one constant.
    first = len(code.co_consts)
    consts = code.co_consts + (None,) + tuple(
        resume if code.co_freevars else types.FunctionType(resume, globals_)
        for resume in resumes)
    none_index = first
    if grad_mode is not None:
        import torch

        consts += (torch._C._set_grad_enabled, bool(grad_mode))
        set_grad_index, flag_index = len(consts) - 2, len(consts) - 1

    # The trampolines: the stack after the instruction, top first, into
    # temporaries (a NULL, a call's, into a scratch local: POP_TOP cannot
    # take it), then R(locals..., stack..., cells...).
    trampolines = []
    null_slot = len(varnames) - 1
    for number, (_, stack) in enumerate(successors):
        trampoline = bytearray()
        items = sum(not null for null in stack)
        out_slot = count + len(inputs) + items
        for null in reversed(stack):
            if null:
                _emit(trampoline, "STORE_FAST", null_slot)
            else:
                out_slot -= 1
                _emit(trampoline, "STORE_FAST", out_slot)
        _emit(trampoline, "PUSH_NULL")
        resume_index = first + 1 + number
        if code.co_freevars:
            first_free = len(varnames) + len(cell_slots) - len(arg_cells)
            for free in range(len(code.co_freevars)):
                _emit(trampoline, "LOAD_CLOSURE", first_free + free)
            _emit(trampoline, "BUILD_TUPLE", len(code.co_freevars))
            _emit(trampoline, "LOAD_CONST", resume_index)
            _emit(trampoline, "MAKE_FUNCTION", 0x08)
        else:
            _emit(trampoline, "LOAD_CONST", resume_index)
        # R(locals..., stack..., cells...): an argument that is a cell goes
        # as its cell, after the stack, as the others do.
        for slot in range(count):
            passed = bound[slot] and slot not in arg_cells
            _emit(trampoline, "LOAD_FAST" if passed else "LOAD_CONST",
                  slot if passed else none_index)
        for slot in range(count + len(inputs), count + len(inputs) + items):
            _emit(trampoline, "LOAD_FAST", slot)
        for slot in cell_slots:
            _emit(trampoline, "LOAD_CLOSURE", slot)
        _emit_call(trampoline, count + items + len(cell_slots))
        _emit(trampoline, "RETURN_VALUE")
        trampolines.append(trampoline)

    head = bytearray()
    _emit_frame_start(head, code)
    starts = []  # each trampoline's first code unit
    unit = len(head) // 2 + 4  # after the fixed jump
    for trampoline in trampolines:
        starts.append(unit)
        unit += len(trampoline) // 2
    head += _fixed_jump("JUMP_FORWARD", unit - len(head) // 2 - 4)

    restore = bytearray()
    if grad_mode is not None:
        _emit(restore, "PUSH_NULL")
        _emit(restore, "LOAD_CONST", set_grad_index)
        _emit(restore, "LOAD_CONST", flag_index)
        _emit_call(restore, 1)
        _emit(restore, "POP_TOP")
    _emit_restore(restore, bound, stack_nulls)
    # The cells that are not arguments, into their slots.
    cell_inputs = count + len(inputs) - len(cell_locals)
    for j, slot in enumerate(slot for slot in cell_slots if slot >= count):
        _emit(restore, "LOAD_FAST", cell_inputs + j)
        _emit(restore, "STORE_FAST", slot)
    in_body = not conditional or _inside_handler(code, offset)
    if not in_body:
        # [jump if (not) true to the second] [back to the next
        # instruction's trampoline] [back to the target's].
        jump_units = 1 + _CACHES[_OP[conditional[0]]]  # its argument is small
        to_next = _backward_jump(unit + len(restore) // 2 + jump_units, starts[0])
        _emit(restore, conditional[0], len(to_next) // 2)
        restore += to_next
        restore += _backward_jump(unit + len(restore) // 2, starts[1])
    else:
        # Into the body, at the instruction (at the KW_NAMES or PRECALL that
        # set its call up, which run with it).
        entry = prefix[0].offset if prefix else offset
        restore += _fixed_jump("JUMP_FORWARD", entry // 2)

    prologue_units = unit + len(restore) // 2
    body = bytearray(_shift_cell_indices(code, len(varnames) - count))
    if in_body:
        # Each side's first instruction becomes a jump back to its
        # trampoline; the instruction itself stays.
        # A handler's code may run on into a side (and then resumes there, as
        # it would), but not into the middle of a jump written over one.
        landings = {entry.target for entry in dis._parse_exception_table(code)}
        landings.update(item.argval for item in _instructions(code)
                        if item.opcode in dis.hasjrel or item.opcode in dis.hasjabs)
        written = [((prefix[0].offset if prefix else offset), next_offset)]
        for (target, _), start in zip(successors, starts):
            back = _backward_jump(prologue_units + target // 2, start)
            if target + len(back) > len(body):
                raise ValueError("no room after the break instruction")
            if any(target < end and begin < target + len(back) for begin, end in written):
                raise ValueError("the sides of a branch overlap")
            if any(target < landing < target + len(back) for landing in landings):
                raise ValueError("a jump lands inside the instructions a resume jump overwrites")
            body[target:target + len(back)] = back
            written.append((target, target + len(back)))
    # The frame start on the function's first line, the trampolines on the
    # break's (a traceback through R's call shows the user's statement),
    # the restore back on the first line, where the body's table starts.
    first_line = code.co_firstlineno
    trampoline_units = unit - len(head) // 2
    linetable = (_line_entries(len(head) // 2, 0)
                 + _line_entries(trampoline_units, line - first_line)
                 + _line_entries(len(restore) // 2, first_line - line)
                 + code.co_linetable)
    continued = code.replace(
        co_code=bytes(head + b"".join(trampolines) + restore + body),
        co_linetable=bytes(linetable),
        co_exceptiontable=_shifted_exception_table(code, prologue_units),
        co_consts=consts,
        co_varnames=varnames,
        co_nlocals=len(varnames),
        co_argcount=count + len(inputs),
        co_posonlyargcount=0,
        co_kwonlyargcount=0,
        co_flags=code.co_flags & ~(_CO_VARARGS | _CO_VARKEYWORDS),
        co_stacksize=(code.co_stacksize + len(stack_nulls) + count + len(stack_nulls)
                      + len(cell_slots)
                      + len(code.co_freevars) + 4),
        co_qualname=f"{code.co_qualname}.<graph break at line {line}>",
    )
    function = types.FunctionType(continued, globals_, closure=closure)
    return function, resumes, count, cell_locals
