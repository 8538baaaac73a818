// Decodes code objects through the interpreter's `dis` module.
// Depends on pybind11 and CPython.
#include "frontend/Bytecode.h"

#include "frontend/CodeExtra.h"

#include "ir/Error.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>

namespace kiln::frontend {
namespace {

Opcode opcodeFromName(const std::string &name) {
  static const std::unordered_map<std::string_view, Opcode> table = [] {
    std::unordered_map<std::string_view, Opcode> result;
#define KILN_OPCODE_NAME(name) result[#name] = Opcode::name;
    KILN_OPCODES(KILN_OPCODE_NAME)
#undef KILN_OPCODE_NAME
    return result;
  }();
  auto it = table.find(name);
  return it == table.end() ? Opcode::Unknown : it->second;
}

bool isJump(Opcode opcode) {
  switch (opcode) {
  case Opcode::FOR_ITER:
  case Opcode::JUMP_FORWARD:
  case Opcode::JUMP_BACKWARD:
  case Opcode::JUMP_BACKWARD_NO_INTERRUPT:
  case Opcode::JUMP:
  case Opcode::POP_JUMP_IF_FALSE:
  case Opcode::POP_JUMP_IF_TRUE:
  case Opcode::POP_JUMP_IF_NONE:
  case Opcode::POP_JUMP_IF_NOT_NONE:
  case Opcode::POP_JUMP_FORWARD_IF_FALSE:
  case Opcode::POP_JUMP_FORWARD_IF_TRUE:
  case Opcode::POP_JUMP_FORWARD_IF_NONE:
  case Opcode::POP_JUMP_FORWARD_IF_NOT_NONE:
  case Opcode::POP_JUMP_BACKWARD_IF_FALSE:
  case Opcode::POP_JUMP_BACKWARD_IF_TRUE:
  case Opcode::POP_JUMP_BACKWARD_IF_NONE:
  case Opcode::POP_JUMP_BACKWARD_IF_NOT_NONE:
  case Opcode::JUMP_IF_FALSE_OR_POP:
  case Opcode::JUMP_IF_TRUE_OR_POP:
    return true;
  default:
    return false;
  }
}

} // namespace

namespace {

using DecodedSlot = std::shared_ptr<const Bytecode>;

void freeDecoded(void *slot) { delete static_cast<DecodedSlot *>(slot); }

Py_ssize_t decodedExtraIndex() {
  static Py_ssize_t index = KILN_REQUEST_CODE_EXTRA_INDEX(freeDecoded);
  return index;
}

} // namespace

std::shared_ptr<const Bytecode> Bytecode::decode(py::handle code) {
  // Decoded once per code object (a module's forward is inlined once per
  // instance, and `dis` is slow), kept in the code object's extra slot: it
  // goes with the code, as functions made at run time (eval, exec) do.
  void *extra = nullptr;
  if (KILN_CODE_GET_EXTRA(code.ptr(), decodedExtraIndex(), &extra) < 0)
    PyErr_Clear();
  if (extra)
    return *static_cast<DecodedSlot *>(extra);
  std::shared_ptr<const Bytecode> decoded = decodeUncached(code);
  auto *slot = new DecodedSlot(decoded);
  if (KILN_CODE_SET_EXTRA(code.ptr(), decodedExtraIndex(), slot) < 0) {
    PyErr_Clear();
    delete slot;
  }
  return decoded;
}

std::shared_ptr<const Bytecode> Bytecode::decodeUncached(py::handle code) {
  int flags = code.attr("co_flags").cast<int>();
  auto bytecode = std::make_shared<Bytecode>();
  bytecode->filename = code.attr("co_filename").cast<std::string>();
  bytecode->name = code.attr("co_name").cast<std::string>();
  bytecode->firstLine = code.attr("co_firstlineno").cast<int>();
  bytecode->isGenerator = flags & CO_GENERATOR;
  if (flags & (CO_COROUTINE | CO_ITERABLE_COROUTINE | CO_ASYNC_GENERATOR))
    throw Unsupported("coroutines and async generators run in CPython (" +
                      bytecode->name + " at " + bytecode->filename + ":" +
                      std::to_string(bytecode->firstLine) + ")");
  py::module_ sys = py::module_::import("sys");
  bytecode->pythonMinor = sys.attr("version_info").attr("minor").cast<int>();

  py::module_ dis = py::module_::import("dis");
  std::unordered_map<int, int> indexOfOffset;
  int line = bytecode->firstLine;
  for (py::handle item : dis.attr("get_instructions")(code)) {
    Instruction instruction;
    instruction.opname = item.attr("opname").cast<std::string>();
    instruction.opcode = opcodeFromName(instruction.opname);
    py::object arg = item.attr("arg");
    instruction.arg = arg.is_none() ? 0 : arg.cast<int>();
    instruction.argval = item.attr("argval");
    // 3.11's dis leaves KW_NAMES unresolved: its argument indexes co_consts.
    if (instruction.opcode == Opcode::KW_NAMES)
      instruction.argval = code.attr("co_consts")[py::int_(instruction.arg)];
    instruction.offset = item.attr("offset").cast<int>();
    py::object startsLine = item.attr("starts_line");
    if (!startsLine.is_none())
      line = startsLine.cast<int>();
    instruction.line = line;
    indexOfOffset[instruction.offset] =
        static_cast<int>(bytecode->instructions.size());
    bytecode->instructions.push_back(std::move(instruction));
  }
  // Exception handlers, by instruction index (an entry's end is the offset
  // after its last instruction, or a cache entry within it).
  if (py::hasattr(dis, "_parse_exception_table")) {
    std::vector<int> offsets;
    for (const Instruction &instruction : bytecode->instructions)
      offsets.push_back(instruction.offset);
    auto indexAtOrAfter = [&](int offset) {
      return static_cast<int>(
          std::lower_bound(offsets.begin(), offsets.end(), offset) -
          offsets.begin());
    };
    for (py::handle entry : dis.attr("_parse_exception_table")(code)) {
      ExceptionHandler handler;
      handler.start = indexAtOrAfter(entry.attr("start").cast<int>());
      handler.end = indexAtOrAfter(entry.attr("end").cast<int>());
      auto target = indexOfOffset.find(entry.attr("target").cast<int>());
      if (target == indexOfOffset.end())
        throw Error("an exception handler at an unknown offset in " +
                    bytecode->name);
      handler.target = target->second;
      handler.depth = entry.attr("depth").cast<int>();
      handler.lasti = entry.attr("lasti").cast<bool>();
      bytecode->handlers.push_back(handler);
    }
  }
  for (Instruction &instruction : bytecode->instructions) {
    if (!isJump(instruction.opcode))
      continue;
    auto it = indexOfOffset.find(instruction.argval.cast<int>());
    if (it == indexOfOffset.end())
      throw Error("jump to an unknown offset in " + bytecode->name);
    instruction.jumpTarget = it->second;
  }
  return bytecode;
}

} // namespace kiln::frontend
