// A code object's instructions, decoded once per code object by the
// interpreter's own `dis` module, so one decoder serves CPython 3.11 and 3.12.
// Depends on pybind11 and CPython.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

namespace kiln::frontend {

namespace py = pybind11;

// Every opcode the symbolic evaluator knows, by name; names absent from the
// running interpreter are simply never seen.
// clang-format off: one opcode list, packed by hand.
#define KILN_OPCODES(X)                                                        \
  X(NOP) X(RESUME) X(PRECALL) X(CACHE) X(EXTENDED_ARG) X(POP_TOP) X(PUSH_NULL) \
  X(END_FOR) X(COPY) X(SWAP) X(LOAD_CONST) X(RETURN_CONST) X(RETURN_VALUE)     \
  X(LOAD_FAST) X(LOAD_FAST_CHECK) X(LOAD_FAST_AND_CLEAR) X(STORE_FAST)         \
  X(DELETE_FAST) X(LOAD_GLOBAL) X(LOAD_NAME) X(LOAD_ATTR) X(LOAD_METHOD)       \
  X(STORE_ATTR) X(STORE_GLOBAL) X(LOAD_DEREF) X(STORE_DEREF) X(LOAD_CLOSURE)   \
  X(MAKE_CELL) X(COPY_FREE_VARS) X(LOAD_SUPER_ATTR) X(BINARY_OP)               \
  X(BINARY_SUBSCR) X(STORE_SUBSCR) X(DELETE_SUBSCR) X(BINARY_SLICE)            \
  X(STORE_SLICE) X(BUILD_SLICE) X(UNARY_NEGATIVE) X(UNARY_NOT)                 \
  X(UNARY_INVERT) X(UNARY_POSITIVE) X(CALL_INTRINSIC_1) X(COMPARE_OP)          \
  X(IS_OP) X(CONTAINS_OP) X(BUILD_TUPLE) X(BUILD_LIST) X(BUILD_MAP)            \
  X(BUILD_CONST_KEY_MAP) X(BUILD_SET) X(BUILD_STRING) X(LIST_APPEND)           \
  X(LIST_EXTEND) X(LIST_TO_TUPLE) X(SET_ADD) X(SET_UPDATE) X(MAP_ADD) X(DICT_UPDATE)         \
  X(DICT_MERGE) X(UNPACK_SEQUENCE) X(UNPACK_EX) X(FORMAT_VALUE) X(GET_ITER)    \
  X(FOR_ITER) X(JUMP_FORWARD) X(JUMP_BACKWARD) X(JUMP_BACKWARD_NO_INTERRUPT)   \
  X(JUMP) X(POP_JUMP_IF_FALSE) X(POP_JUMP_IF_TRUE) X(POP_JUMP_IF_NONE)         \
  X(POP_JUMP_IF_NOT_NONE) X(POP_JUMP_FORWARD_IF_FALSE)                         \
  X(POP_JUMP_FORWARD_IF_TRUE) X(POP_JUMP_FORWARD_IF_NONE)                      \
  X(POP_JUMP_FORWARD_IF_NOT_NONE) X(POP_JUMP_BACKWARD_IF_FALSE)                \
  X(POP_JUMP_BACKWARD_IF_TRUE) X(POP_JUMP_BACKWARD_IF_NONE)                    \
  X(POP_JUMP_BACKWARD_IF_NOT_NONE) X(JUMP_IF_FALSE_OR_POP)                     \
  X(JUMP_IF_TRUE_OR_POP) X(CALL) X(KW_NAMES) X(CALL_FUNCTION_EX)               \
  X(MAKE_FUNCTION) X(BEFORE_WITH) X(LOAD_ASSERTION_ERROR) X(RAISE_VARARGS)     \
  X(LOAD_BUILD_CLASS)                                                          \
  X(RETURN_GENERATOR) X(YIELD_VALUE) X(IMPORT_NAME) X(IMPORT_FROM)          \
  X(MATCH_SEQUENCE) X(MATCH_MAPPING) X(MATCH_KEYS) X(MATCH_CLASS) X(GET_LEN) \
  X(PUSH_EXC_INFO) X(POP_EXCEPT) X(CHECK_EXC_MATCH) X(RERAISE)               \
  X(WITH_EXCEPT_START)
// clang-format on

enum class Opcode : uint16_t {
#define KILN_OPCODE_ENUM(name) name,
  KILN_OPCODES(KILN_OPCODE_ENUM)
#undef KILN_OPCODE_ENUM
      Unknown
};

struct Instruction {
  Opcode opcode = Opcode::Unknown;
  std::string opname; // as `dis` names it, for messages
  int arg = 0;
  py::object argval;   // the resolved argument: a name, constant, target...
  int offset = 0;      // in bytes
  int line = 0;        // source line, 0 when unknown
  int jumpTarget = -1; // instruction index, for jumps and FOR_ITER
};

/// An entry of the code's exception table: an exception raised by an
/// instruction in [start, end) (indices) goes to `target` with the stack cut
/// to `depth` items (and the raising instruction's offset pushed, `lasti`).
struct ExceptionHandler {
  int start = 0;
  int end = 0;
  int target = 0;
  int depth = 0;
  bool lasti = false;
};

/// The decoded instructions of one code object.
class Bytecode {
public:
  /// Decodes `code` (a code object); throws kiln::Unsupported for code the
  /// evaluator cannot handle at all (coroutines, async generators).
  static std::shared_ptr<const Bytecode> decode(py::handle code);
  static std::shared_ptr<const Bytecode> decodeUncached(py::handle code);

  std::vector<Instruction> instructions;
  std::string filename;
  std::string name;
  int firstLine = 0;
  /// A generator function: the evaluator runs it to exhaustion.
  bool isGenerator = false;
  /// The Python interpreter's minor version: 11 or 12.
  int pythonMinor = 0;
  std::vector<ExceptionHandler> handlers;
  /// The handler of the instruction at `index`, or null.
  const ExceptionHandler *handlerAt(size_t index) const {
    for (const ExceptionHandler &handler : handlers)
      if (int(index) >= handler.start && int(index) < handler.end)
        return &handler;
    return nullptr;
  }
};

} // namespace kiln::frontend
