// The symbolic evaluator's instruction loop: each bytecode instruction of
// CPython 3.11 and 3.12 applied to the symbolic stack and locals.
// Depends on frontend/Evaluator.h, bridge/, pybind11, CPython.
#include "frontend/Evaluator.h"

#include "bridge/PythonConversion.h"

namespace kiln::frontend::evaluation {

void Evaluator::setUpFrame(Frame &frame, py::object code, py::object globals) {
  frame.code = Bytecode::decode(code);
  frame.codeObject = code;
  py::object builtins =
      globals.attr("get")("__builtins__", Handles::get().builtins);
  if (py::isinstance(builtins, Handles::get().moduleType))
    builtins = builtins.attr("__dict__");
  frame.globals = std::move(globals);
  frame.builtins = builtins;
  auto *codeObject = reinterpret_cast<PyCodeObject *>(code.ptr());
  frame.locals.resize(codeObject->co_nlocalsplus);
  for (py::handle name :
       py::reinterpret_borrow<py::tuple>(codeObject->co_localsplusnames))
    frame.localNames.push_back(name.cast<std::string>());
  const char *kinds = PyBytes_AsString(codeObject->co_localspluskinds);
  frame.localKinds.assign(kinds, kinds + codeObject->co_nlocalsplus);
}

VariablePtr Evaluator::local(Frame &frame, int index) {
  if (index < 0 || index >= static_cast<int>(frame.locals.size()))
    throw Error("local index out of range");
  VariablePtr &slot = frame.locals[index];
  if (!slot && frame.isRoot &&
      index < static_cast<int>(frame.rootArguments.size()) &&
      frame.rootArguments[index]) {
    // Two arguments that are one tensor (a resume function's locals after
    // `y = x`) are one graph input, guarded to stay one object.
    PyObject *object = frame.rootArguments[index].ptr();
    for (int other = 0; other < index && python::isTensor(object); ++other) {
      if (frame.rootArguments[other].ptr() != object)
        continue;
      slot = local(frame, other);
      guards_.addSameAs(Source::local(index, frame.localNames[index]),
                        Source::local(other, frame.localNames[other]));
      return slot;
    }
    slot = wrap(frame.rootArguments[index],
                Source::local(index, frame.localNames[index]));
    // *args and **kwargs are made fresh by each call.
    auto *code = reinterpret_cast<PyCodeObject *>(frame.codeObject.ptr());
    int named = code->co_argcount + code->co_kwonlyargcount;
    if (index >= named)
      slot->ownedByFrame = true;
  }
  if (!slot)
    unsupported("local variable '" + frame.localNames[index] +
                "' referenced before assignment");
  return slot;
}

void Evaluator::clearLocal(Frame &frame, int index) {
  frame.locals.at(index) = nullptr;
  if (frame.isRoot && index < static_cast<int>(frame.rootArguments.size()))
    frame.rootArguments[index] = py::object();
}

/// The module whose namespace `globals` is, or None (exec'd code).
static py::object moduleOfGlobals(py::handle globals) {
  py::object name =
      py::reinterpret_borrow<py::dict>(globals).attr("get")("__name__");
  if (!PyUnicode_Check(name.ptr()))
    return py::none();
  py::object module =
      py::module_::import("sys").attr("modules").attr("get")(name, py::none());
  if (module.is_none() ||
      !py::getattr(module, "__dict__", py::none()).is(globals))
    return py::none();
  return module;
}

VariablePtr Evaluator::globalsModule(Frame &frame, const std::string &what) {
  py::object module = moduleOfGlobals(frame.globals);
  if (module.is_none())
    unsupported(what + " of code whose globals are no module's");
  std::string name = module.attr("__name__").cast<std::string>();
  return wrap(module, Source::fixed(module, "sys.modules['" + name + "']"));
}

VariablePtr Evaluator::loadGlobal(Frame &frame, const std::string &name) {
  py::str key(name);
  if (!written_.empty()) {
    // A global this capture assigned reads back its new value.
    py::object module = moduleOfGlobals(frame.globals);
    auto it = written_.find({module.ptr(), name});
    if (!module.is_none() && it != written_.end())
      return it->second;
  }
  if (PyDict_Contains(frame.globals.ptr(), key.ptr()) == 1)
    return wrap(frame.globals[key], globalSource(frame.globals, name));
  if (PyDict_Contains(frame.builtins.ptr(), key.ptr()) == 1) {
    bool rootGlobals = frame.globals.ptr() == inputs_.globals;
    SourcePtr source = rootGlobals ? Source::builtin(name) : nullptr;
    return wrap(frame.builtins[key], source);
  }
  unsupported("name '" + name + "' is not defined");
}

SourcePtr Evaluator::globalSource(const py::object &globals,
                                  const std::string &name) {
  if (globals.ptr() == inputs_.globals)
    return Source::global(name);
  return Source::item(Source::fixed(globals, globalsName(globals)),
                      py::str(name));
}

void Evaluator::doCall(Frame &frame, size_t argumentCount) {
  std::vector<VariablePtr> args = popN(frame, argumentCount);
  VariablePtr second = pop(frame);
  VariablePtr first = pop(frame);
  VariablePtr callable = second;
  if (!first->is(Kind::Null)) {
    callable = first;
    args.insert(args.begin(), second);
  }
  std::vector<std::pair<std::string, VariablePtr>> kwargs;
  if (frame.kwnames && !frame.kwnames.is_none()) {
    py::tuple names = frame.kwnames;
    size_t count = names.size();
    for (size_t i = 0; i < count; ++i)
      kwargs.emplace_back(names[i].cast<std::string>(),
                          args[args.size() - count + i]);
    args.resize(args.size() - count);
    frame.kwnames = py::object();
  }
  frame.stack.push_back(call(callable, std::move(args), std::move(kwargs)));
}

VariablePtr Evaluator::userOperator(const VariablePtr &left,
                                    const VariablePtr &right,
                                    const std::string &method,
                                    const std::string &reflected,
                                    bool comparison) {
  auto userClass = [](const VariablePtr &value) -> PyObject * {
    if (value->is(Kind::Instance))
      return value->object.ptr();
    if (value->is(Kind::Object) && value->object)
      return reinterpret_cast<PyObject *>(Py_TYPE(value->object.ptr()));
    return nullptr;
  };
  PyObject *leftClass = userClass(left), *rightClass = userClass(right);
  if (!leftClass && !rightClass)
    return nullptr;
  // CPython tries the right operand's reflected method first where its
  // class is a proper subclass of the left's: not modelled.
  if (leftClass && rightClass && leftClass != rightClass &&
      PyObject_IsSubclass(rightClass, leftClass) == 1)
    unsupported("an operator between an object and one of a subclass");
  auto notImplemented = [](const VariablePtr &result) {
    return result && result->is(Kind::Constant) &&
           result->object.ptr() == Py_NotImplemented;
  };
  VariablePtr result;
  if (leftClass)
    result = callPythonSpecialMethod(left, method.c_str(), {right});
  // Arithmetic reflects only to another class; comparisons reflect always.
  if ((!result || notImplemented(result)) && rightClass &&
      (comparison || leftClass != rightClass) && !reflected.empty())
    result = callPythonSpecialMethod(right, reflected.c_str(), {left});
  if (!result)
    return nullptr;
  if (notImplemented(result))
    unsupported("an operator both operands' classes leave NotImplemented");
  return result;
}

void Evaluator::binaryOp(Frame &frame, int op) {
  // CPython's NB_* numbering; the in-place forms follow at op + 13.
  static const char *kOperators[] = {
      "add", "and_", "floordiv", "lshift", "matmul",  "mul", "mod",
      "or_", "pow",  "rshift",   "sub",    "truediv", "xor"};
  static const char *kInplace[] = {
      "iadd", "iand", "ifloordiv", "ilshift", "imatmul",  "imul", "imod",
      "ior",  "ipow", "irshift",   "isub",    "itruediv", "ixor"};
  VariablePtr right = pop(frame);
  VariablePtr left = pop(frame);
  bool inplace = op >= 13;
  int base = inplace ? op - 13 : op;
  if (base < 0 || base >= 13)
    unsupported("binary operator " + std::to_string(op));
  const Handles &h = Handles::get();
  if (left->is(Kind::Instance) || right->is(Kind::Instance) ||
      left->is(Kind::Object) || right->is(Kind::Object)) {
    // User classes' operators (__add__, __radd__; __iadd__ first in place).
    std::string name = std::string(kOperators[base]);
    if (name.back() == '_')
      name.pop_back(); // and_, or_
    VariablePtr result;
    if (inplace)
      result = userOperator(left, right, "__i" + name + "__", "");
    if (!result || (result->is(Kind::Constant) &&
                    result->object.ptr() == Py_NotImplemented))
      result =
          userOperator(left, right, "__" + name + "__", "__r" + name + "__");
    if (result) {
      frame.stack.push_back(result);
      return;
    }
  }
  if (base == 1 || base == 7 || base == 10 || base == 12) {
    // &, |, - and ^ of a dict's keys or items view: the set of them.
    for (VariablePtr *side : {&left, &right}) {
      if (!(*side)->is(Kind::DictView) || (*side)->name == "values")
        continue;
      py::set elements;
      VariablePtr iterator = iterate(*side);
      for (const VariablePtr &element : iterator->items) {
        std::optional<py::object> constant = asConstant(element);
        if (!constant)
          unsupported("a set operation on a dict view holding values that "
                      "are not constants");
        elements.add(*constant);
      }
      *side = setFromObject(elements);
    }
  }
  std::optional<py::object> a = asConstant(left), b = asConstant(right);
  bool tensorInvolved = left->is(Kind::Tensor) || right->is(Kind::Tensor);
  if (!tensorInvolved && a && b && left->kind != Kind::List &&
      left->kind != Kind::Dict && right->kind != Kind::List) {
    py::object function = h.operatorModule.attr(kOperators[base]);
    // "%s" % size: text takes the size's value (see specializeSizes).
    if (PyUnicode_Check(a->ptr()) || PyUnicode_Check(b->ptr())) {
      a = specializeSizes(*a);
      b = specializeSizes(*b);
    }
    try {
      frame.stack.push_back(Variable::constant(function(*a, *b)));
    } catch (py::error_already_set &error) {
      raiseCaptured(error); // 1 / 0 inside a try block is caught
    }
    return;
  }
  if (!tensorInvolved) {
    // Sequences: concatenation and repetition build new symbolic sequences
    // (a constant tuple is a tuple of constants here).
    VariablePtr first = sequenceOf(left), second = sequenceOf(right);
    if (first && base == 0 && inplace && first->is(Kind::List) && second &&
        first == left) {
      // list += any sequence extends the list itself (aliases see it).
      checkNotInput(left, "extending");
      std::vector<VariablePtr> added = second->items;
      left->items.insert(left->items.end(), added.begin(), added.end());
      frame.stack.push_back(left);
      return;
    }
    if (first && second && base == 0 && first->kind == second->kind) {
      std::vector<VariablePtr> items = first->items;
      items.insert(items.end(), second->items.begin(), second->items.end());
      frame.stack.push_back(Variable::sequence(first->kind, std::move(items)));
      return;
    }
    // sequence * n and n * sequence; list *= n repeats the list itself.
    VariablePtr repeated = first ? first : second;
    std::optional<py::object> times = first ? b : a;
    if (repeated && base == 5 && times && PyLong_Check(times->ptr()) &&
        !PyBool_Check(times->ptr())) {
      std::vector<VariablePtr> items;
      for (int64_t i = 0; i < times->cast<int64_t>(); ++i)
        items.insert(items.end(), repeated->items.begin(),
                     repeated->items.end());
      if (inplace && first == left && left->is(Kind::List)) {
        checkNotInput(left, "repeating");
        left->items = std::move(items);
        frame.stack.push_back(left);
        return;
      }
      frame.stack.push_back(
          Variable::sequence(repeated->kind, std::move(items)));
      return;
    }
    if (left->is(Kind::Dict) && base == 7 &&
        (right->is(Kind::Dict) || (inplace && sequenceOf(right)))) {
      // d | other: a new dict; d |= other (a dict or pairs) updates d.
      VariablePtr target = left;
      if (!inplace) {
        target = Variable::make(Kind::Dict);
        target->keys = left->keys;
        target->items = left->items;
      } else {
        checkNotInput(left, "updating");
      }
      mergeIntoDict(target, right);
      frame.stack.push_back(target);
      return;
    }
    unsupported(std::string("operator ") + kOperators[base] + " on " +
                kindNameOf(pythonTypeOf(left)) + " and " +
                kindNameOf(pythonTypeOf(right)));
  }
  py::object function =
      h.operatorModule.attr(inplace ? kInplace[base] : kOperators[base]);
  frame.stack.push_back(torchCall(function, {left, right}, {}));
}

VariablePtr Evaluator::unaryOp(const char *name, const VariablePtr &operand) {
  py::object function = Handles::get().operatorModule.attr(name);
  if (std::optional<py::object> constant = asConstant(operand);
      constant && !operand->is(Kind::Tensor))
    return Variable::constant(function(*constant));
  if (VariablePtr result = callPythonSpecialMethod(
          operand, (std::string("__") + name + "__").c_str(), {}))
    return result; // a user class's __neg__, __invert__, __pos__
  return torchCall(function, {operand}, {});
}

void Evaluator::compareOp(Frame &frame, const std::string &op) {
  static const std::pair<const char *, const char *> kComparisons[] = {
      {"<", "lt"},  {"<=", "le"}, {"==", "eq"},
      {"!=", "ne"}, {">", "gt"},  {">=", "ge"}};
  VariablePtr right = pop(frame);
  VariablePtr left = pop(frame);
  const char *name = nullptr;
  for (const auto &[symbol, function] : kComparisons)
    if (op == symbol)
      name = function;
  if (!name)
    unsupported("comparison " + op);
  const Handles &h = Handles::get();
  py::object function = h.operatorModule.attr(name);
  if (left->is(Kind::Tensor) || right->is(Kind::Tensor)) {
    frame.stack.push_back(torchCall(function, {left, right}, {}));
    return;
  }
  std::optional<py::object> a = asConstant(left), b = asConstant(right);
  if (a && b) {
    frame.stack.push_back(Variable::constant(function(*a, *b)));
    return;
  }
  // User classes' comparisons (dataclasses' generated __eq__, ...); the
  // reflection of < is >, of == is ==.
  static const std::pair<const char *, const char *> kReflected[] = {
      {"lt", "gt"}, {"le", "ge"}, {"eq", "eq"},
      {"ne", "ne"}, {"gt", "lt"}, {"ge", "le"}};
  for (const auto &[own, other] : kReflected)
    if (std::string(name) == own)
      if (VariablePtr result =
              userOperator(left, right, std::string("__") + own + "__",
                           std::string("__") + other + "__",
                           /*comparison=*/true)) {
        frame.stack.push_back(result);
        return;
      }
  if (op == "==" || op == "!=") {
    // Keys views compare as the sets of their keys (with sets, too).
    auto keySet = [&](const VariablePtr &value,
                      const std::optional<py::object> &constant)
        -> std::optional<py::object> {
      if (value->is(Kind::DictView) && value->name == "keys") {
        py::set keys;
        for (const py::object &key : value->items[0]->keys)
          keys.add(key);
        return py::object(keys);
      }
      if (value->is(Kind::Set))
        return value->object;
      if (constant && PyAnySet_Check(constant->ptr()))
        return constant;
      return std::nullopt;
    };
    std::optional<py::object> leftKeys = keySet(left, a),
                              rightKeys = keySet(right, b);
    if (leftKeys && rightKeys &&
        (left->is(Kind::DictView) || right->is(Kind::DictView))) {
      bool equal = leftKeys->equal(*rightKeys);
      frame.stack.push_back(
          Variable::constant(py::bool_(op == "==" ? equal : !equal)));
      return;
    }
    // Objects whose class compares by identity (object.__eq__): the same
    // object or not.
    auto byIdentity = [&](const VariablePtr &value) {
      if (!value->is(Kind::Instance) && !value->is(Kind::Object))
        return false;
      py::object type = pythonTypeOf(value);
      return lookUpOnType(type, "__eq__") ==
                 lookUpOnType(h.builtin("object"), "__eq__") &&
             lookUpOnType(type, "__ne__") ==
                 lookUpOnType(h.builtin("object"), "__ne__");
    };
    // (Two objects from the caller would need a guard on their identity:
    // left to the code below.)
    if (byIdentity(left) && byIdentity(right) &&
        (left->is(Kind::Instance) || right->is(Kind::Instance))) {
      bool same = left == right; // an object made in the frame is itself
      frame.stack.push_back(
          Variable::constant(py::bool_(op == "==" ? same : !same)));
      return;
    }
  }
  if ((op == "==" || op == "!=") && (a || b)) {
    // A symbolic container or object against a constant (usually None).
    bool equal = false;
    if (a && !b && (right->kind == Kind::Object || right->kind == Kind::Module))
      equal = right->object.equal(*a);
    else if (b && !a &&
             (left->kind == Kind::Object || left->kind == Kind::Module))
      equal = left->object.equal(*b);
    else if ((a && a->is_none()) || (b && b->is_none()))
      equal = false;
    else
      unsupported("comparison of a " + kindNameOf(pythonTypeOf(left)) +
                  " and a " + kindNameOf(pythonTypeOf(right)));
    frame.stack.push_back(
        Variable::constant(py::bool_(op == "==" ? equal : !equal)));
    return;
  }
  unsupported("comparison of a " + kindNameOf(pythonTypeOf(left)) + " and a " +
              kindNameOf(pythonTypeOf(right)));
}

VariablePtr Evaluator::runFrame(Frame &frame) {
  const std::vector<Instruction> &instructions = frame.code->instructions;
  while (!frame.returned) {
    if (frame.pc >= instructions.size())
      throw Error("ran past the end of " + frame.code->name);
    if (frame.isRoot) {
      if (rootStep_ == stopStep_) {
        stopped_ = true;
        return nullptr;
      }
      ++rootStep_;
    }
    size_t pc = frame.pc;
    const Instruction &instruction = instructions[frame.pc++];
    if (++executed_ > kMaxInstructions)
      unsupported("more than " + std::to_string(kMaxInstructions) +
                  " instructions (a long unrolled loop)");
    where_ = frame.code->filename + ":" + std::to_string(instruction.line) +
             " in " + frame.code->name;
    try {
      try {
        execute(frame, instruction);
      } catch (PythonException &raised) {
        const ExceptionHandler *handler = frame.code->handlerAt(pc);
        if (!handler) {
          if (!frame.isRoot)
            throw; // the caller's try blocks, at its call
          unsupported(py::repr(raised.exception).cast<std::string>() +
                      " raised and not caught in the frame");
        }
        // As CPython unwinds: the stack cut to the block's depth, the
        // raising instruction's offset where the handler re-raises, then
        // the exception.
        if (frame.stack.size() < size_t(handler->depth))
          throw Error("an exception handler deeper than the stack");
        frame.stack.resize(size_t(handler->depth));
        if (handler->lasti)
          frame.stack.push_back(
              Variable::constant(py::int_(instruction.offset)));
        frame.stack.push_back(Variable::constant(raised.exception));
        frame.pc = size_t(handler->target);
      }
    } catch (const Unsupported &error) {
      if (frame.isRoot) {
        failedStep_ = rootStep_ - 1;
        failedPc_ = pc;
        failedOffset_ = instruction.offset;
        failedInExceptBlock_ = handling_ != nullptr;
      }
      std::string message = error.what();
      if (message.find(" [at ") == std::string::npos)
        message += " [at " + where_ + ", " + instruction.opname + "]";
      throw Unsupported(message);
    }
  }
  return frame.returned;
}

void Evaluator::execute(Frame &frame, const Instruction &instruction) {
  const Handles &h = Handles::get();
  int minor = frame.code->pythonMinor;
  switch (instruction.opcode) {
  case Opcode::NOP:
  case Opcode::RESUME:
  case Opcode::PRECALL:
  case Opcode::CACHE:
  case Opcode::EXTENDED_ARG:
    return;
  case Opcode::POP_TOP:
    pop(frame);
    return;
  case Opcode::PUSH_NULL:
    frame.stack.push_back(Variable::make(Kind::Null));
    return;
  case Opcode::END_FOR:
    pop(frame);
    pop(frame);
    return;
  case Opcode::COPY:
    frame.stack.push_back(peek(frame, instruction.arg));
    return;
  case Opcode::SWAP:
    std::swap(peek(frame, 1), peek(frame, instruction.arg));
    return;
  case Opcode::LOAD_CONST:
    // A function among the constants is kiln's own (a resume function's
    // iterator_at): inlined as any Python function.
    if (PyFunction_Check(instruction.argval.ptr())) {
      auto function = Variable::make(Kind::Function);
      function->object = instruction.argval;
      frame.stack.push_back(function);
      return;
    }
    frame.stack.push_back(Variable::constant(instruction.argval));
    return;
  case Opcode::RETURN_CONST:
    frame.returned = Variable::constant(instruction.argval);
    return;
  case Opcode::RETURN_VALUE:
    frame.returned = pop(frame);
    return;
  case Opcode::LOAD_FAST:
  case Opcode::LOAD_FAST_CHECK:
    frame.stack.push_back(local(frame, instruction.arg));
    return;
  case Opcode::LOAD_FAST_AND_CLEAR: {
    VariablePtr &slot = frame.locals.at(instruction.arg);
    frame.stack.push_back(slot ? slot : Variable::make(Kind::Null));
    clearLocal(frame, instruction.arg);
    return;
  }
  case Opcode::STORE_FAST: {
    VariablePtr value = pop(frame);
    // The slot no longer holds its argument (root frames read arguments
    // lazily).
    clearLocal(frame, instruction.arg);
    if (value->object && PyCell_Check(value->object.ptr()) && value->source &&
        (frame.localKinds.at(instruction.arg) & kCellVariableKind)) {
      // A resume function's prologue puts the cells the frame had at the
      // break into their slots: the cell object read from its argument,
      // its contents read (and written) through that.
      auto cell = Variable::make(Kind::Cell);
      cell->object = value->object;
      cell->source = Source::attr(value->source, "cell_contents");
      cell->cells = {value};
      frame.locals.at(instruction.arg) = cell;
      return;
    }
    if (!value->is(Kind::Null))
      frame.locals.at(instruction.arg) = value;
    return;
  }
  case Opcode::DELETE_FAST:
    clearLocal(frame, instruction.arg);
    return;
  case Opcode::LOAD_GLOBAL: {
    // Both 3.11 and 3.12 push NULL first when the low bit is set.
    if (instruction.arg & 1)
      frame.stack.push_back(Variable::make(Kind::Null));
    frame.stack.push_back(
        loadGlobal(frame, instruction.argval.cast<std::string>()));
    return;
  }
  case Opcode::LOAD_ATTR:
  case Opcode::LOAD_METHOD: {
    VariablePtr base = pop(frame);
    bool methodForm = instruction.opcode == Opcode::LOAD_METHOD ||
                      (minor >= 12 && (instruction.arg & 1));
    VariablePtr attribute =
        loadAttr(base, instruction.argval.cast<std::string>());
    if (methodForm)
      frame.stack.push_back(Variable::make(Kind::Null));
    frame.stack.push_back(attribute);
    return;
  }
  case Opcode::LOAD_SUPER_ATTR: {
    VariablePtr self = pop(frame);
    VariablePtr cls = pop(frame);
    pop(frame); // the global `super`
    auto super = Variable::make(Kind::Super);
    super->object = asConstant(cls).value_or(cls->object);
    super->items.push_back(self);
    VariablePtr attribute =
        loadAttr(super, instruction.argval.cast<std::string>());
    if (instruction.arg & 1)
      frame.stack.push_back(Variable::make(Kind::Null));
    frame.stack.push_back(attribute);
    return;
  }
  case Opcode::STORE_ATTR: {
    VariablePtr target = pop(frame);
    VariablePtr value = pop(frame);
    storeAttr(target, instruction.argval.cast<std::string>(), value);
    return;
  }
  case Opcode::STORE_GLOBAL: {
    // A global is an attribute of its module: the write is recorded, read
    // back, and replayed on the module after the graph.
    std::string name = instruction.argval.cast<std::string>();
    VariablePtr value = pop(frame);
    storeAttr(globalsModule(frame, "assigning global '" + name + "'"), name,
              value);
    return;
  }
  case Opcode::MAKE_CELL: {
    VariablePtr &slot = frame.locals.at(instruction.arg);
    auto cell = Variable::make(Kind::Cell);
    if (slot ||
        (frame.isRoot &&
         instruction.arg < static_cast<int>(frame.rootArguments.size()) &&
         frame.rootArguments[instruction.arg]))
      cell->items.push_back(local(frame, instruction.arg));
    slot = cell;
    return;
  }
  case Opcode::COPY_FREE_VARS: {
    size_t count = instruction.arg;
    size_t start = frame.locals.size() - count;
    for (size_t i = 0; i < count && i < frame.freeCells.size(); ++i)
      frame.locals[start + i] = frame.freeCells[i];
    return;
  }
  case Opcode::LOAD_CLOSURE:
    frame.stack.push_back(frame.locals.at(instruction.arg));
    return;
  case Opcode::LOAD_DEREF: {
    VariablePtr cell = frame.locals.at(instruction.arg);
    if (!cell || !cell->is(Kind::Cell))
      unsupported("free variable '" + frame.localNames[instruction.arg] + "'");
    if (cell->object && !written_.empty()) {
      // A cell written in this capture (nonlocal, or a resume function's)
      // reads back its new value, through whichever function reached it.
      auto it = written_.find({cell->object.ptr(), "cell_contents"});
      if (it != written_.end())
        cell->items.assign(1, it->second);
    }
    if (cell->items.empty() && cell->object) {
      py::object contents =
          py::reinterpret_steal<py::object>(PyCell_Get(cell->object.ptr()));
      if (!contents) {
        PyErr_Clear();
        unsupported("free variable '" + frame.localNames[instruction.arg] +
                    "' referenced before assignment");
      }
      cell->items.push_back(wrap(contents, cell->source));
    }
    if (cell->items.empty())
      unsupported("free variable '" + frame.localNames[instruction.arg] +
                  "' referenced before assignment");
    frame.stack.push_back(cell->items[0]);
    return;
  }
  case Opcode::STORE_DEREF: {
    VariablePtr cell = frame.locals.at(instruction.arg);
    if (cell && cell->is(Kind::Cell) && cell->object && !cell->cells.empty()) {
      // A cell passed into a resume function: a write to an outside object,
      // replayed after the graph (closures made before the break see it).
      writeCellContents(cell, pop(frame));
      return;
    }
    if (!cell || !cell->is(Kind::Cell) || cell->object)
      unsupported("assigning nonlocal '" + frame.localNames[instruction.arg] +
                  "' of an enclosing function");
    cell->items.assign(1, pop(frame));
    if (cell->realCell) {
      std::optional<py::object> constant = asConstant(cell->items[0]);
      if (!constant)
        unsupported("assigning a " + kindNameOf(pythonTypeOf(cell->items[0])) +
                    " to '" + frame.localNames[instruction.arg] +
                    "', which a class defined in the frame reads");
      if (PyCell_Set(cell->realCell.ptr(), constant->ptr()) < 0)
        throw py::error_already_set();
    }
    return;
  }
  case Opcode::BINARY_OP:
    binaryOp(frame, instruction.arg);
    return;
  case Opcode::COMPARE_OP:
    compareOp(frame, instruction.argval.cast<std::string>());
    return;
  case Opcode::IS_OP: {
    VariablePtr right = pop(frame);
    VariablePtr left = pop(frame);
    bool same;
    auto objectOf = [](const VariablePtr &v) -> PyObject * {
      if (v->is(Kind::Tensor) || v->is(Kind::Tuple) || v->is(Kind::List) ||
          v->is(Kind::Dict) || v->is(Kind::Iterator) || v->is(Kind::Method) ||
          v->is(Kind::Instance) || v->is(Kind::Set))
        return nullptr;
      return v->object.ptr();
    };
    auto madeInFrame = [](const VariablePtr &v) {
      return v->is(Kind::Instance) || v->is(Kind::Set);
    };
    PyObject *a = objectOf(left), *b = objectOf(right);
    if (a && b)
      same = a == b;
    else if (left == right)
      same = true;
    else if (madeInFrame(left) || madeInFrame(right))
      same = false; // nothing from outside is an object the frame made
    else if ((a && a == Py_None) || (b && b == Py_None))
      same = false; // a symbolic value is never None
    else if ((left->is(Kind::Tensor) && b &&
              !py::isinstance(py::handle(b), h.tensorType)) ||
             (right->is(Kind::Tensor) && a &&
              !py::isinstance(py::handle(a), h.tensorType)))
      same = false; // a tensor is never an object of another type
    else if (left->is(Kind::Tensor) && right->is(Kind::Tensor)) {
      auto leftInput = inputObjects_.find(left->tensor);
      auto rightInput = inputObjects_.find(right->tensor);
      if (left->source && right->source && leftInput != inputObjects_.end() &&
          rightInput != inputObjects_.end()) {
        // Two inputs (tied weights, an argument passed twice): this call's
        // objects, guarded to stay as they are.
        same = leftInput->second.is(rightInput->second);
        if (same)
          guards_.addSameAs(left->source, right->source);
        else
          guards_.addDistinctFrom(left->source, right->source);
      } else {
        // The trace's tensors stand for the objects: an in-place op returns
        // its input's, every other op a new one.
        same = metaTensorOf(left->tensor).is(metaTensorOf(right->tensor));
      }
    } else
      unsupported("`is` between symbolic values");
    frame.stack.push_back(
        Variable::constant(py::bool_(same != (instruction.arg == 1))));
    return;
  }
  case Opcode::CONTAINS_OP: {
    VariablePtr container = builtinContents(pop(frame), "__contains__");
    VariablePtr item = pop(frame);
    std::optional<py::object> key = asConstant(item);
    bool found = false;
    if (container->is(Kind::DictView) && container->name == "items" && key &&
        PyTuple_Check(key->ptr()) && py::len(*key) == 2) {
      // (key, value) in d.items(): the key is there with an equal value.
      const VariablePtr &dict = container->items.at(0);
      py::tuple pair = *key;
      if (int index = findKey(dict, pair[0]); index >= 0) {
        const VariablePtr &item = dict->items[size_t(index)];
        std::optional<py::object> value = asConstant(item);
        if (!value)
          unsupported("`in` on the items of a dict holding a " +
                      kindNameOf(pythonTypeOf(item)));
        found = value->equal(pair[1]);
      }
    } else if ((container->is(Kind::Dict) ||
                (container->is(Kind::DictView) && container->name == "keys")) &&
               key) {
      const VariablePtr &dict =
          container->is(Kind::Dict) ? container : container->items.at(0);
      for (const py::object &candidate : dict->keys)
        found |= candidate.equal(*key);
    } else if (std::optional<py::object> all = asConstant(container);
               all && key) {
      found = PySequence_Contains(all->ptr(), key->ptr()) == 1;
    } else if (container->is(Kind::List) || container->is(Kind::Tuple)) {
      // As list.__contains__: identity first, then == of constants; a
      // comparison with anything else is not decided here.
      for (const VariablePtr &candidate : container->items) {
        if (candidate == item) {
          found = true;
          break;
        }
        std::optional<py::object> value = asConstant(candidate);
        if (!value || !key || candidate->is(Kind::Module) ||
            item->is(Kind::Module))
          unsupported("`in` comparing with a " +
                      kindNameOf(pythonTypeOf(candidate)));
        if (value->equal(*key)) {
          found = true;
          break;
        }
      }
    } else if (container->is(Kind::Object) && key && container->source &&
               PyDict_Check(container->object.ptr())) {
      std::vector<VariablePtr> keyArgument{item};
      found = truthy(readGuardedDict(container, "__contains__", keyArgument));
    } else if (container->is(Kind::Module) && key) {
      found = PySequence_Contains(container->object.ptr(), key->ptr()) == 1;
    } else if (container->is(Kind::Object) &&
               container->object.is(h.environment) && key &&
               container->source) {
      found = PySequence_Contains(container->object.ptr(), key->ptr()) == 1;
      guards_.addCheck(container->source, containsKey(*key, found));
    } else if (VariablePtr result =
                   callPythonSpecialMethod(container, "__contains__", {item})) {
      found = truthy(result);
    } else {
      unsupported("`in` on a " + kindNameOf(pythonTypeOf(container)));
    }
    frame.stack.push_back(
        Variable::constant(py::bool_(found != (instruction.arg == 1))));
    return;
  }
  case Opcode::UNARY_NOT:
    frame.stack.push_back(Variable::constant(py::bool_(!truthy(pop(frame)))));
    return;
  case Opcode::UNARY_NEGATIVE:
  case Opcode::UNARY_INVERT:
  case Opcode::UNARY_POSITIVE: {
    const char *name = instruction.opcode == Opcode::UNARY_NEGATIVE ? "neg"
                       : instruction.opcode == Opcode::UNARY_INVERT ? "invert"
                                                                    : "pos";
    frame.stack.push_back(unaryOp(name, pop(frame)));
    return;
  }
  case Opcode::CALL_INTRINSIC_1: {
    // 3.12: 5 is unary +, 6 list to tuple; others are not captured.
    if (instruction.arg == 6) {
      VariablePtr list = pop(frame);
      frame.stack.push_back(Variable::sequence(Kind::Tuple, list->items));
      return;
    }
    if (instruction.arg == 5) {
      frame.stack.push_back(unaryOp("pos", pop(frame)));
      return;
    }
    unsupported("intrinsic " + std::to_string(instruction.arg));
  }
  case Opcode::LIST_TO_TUPLE: {
    VariablePtr list = pop(frame);
    frame.stack.push_back(Variable::sequence(Kind::Tuple, list->items));
    return;
  }
  case Opcode::BINARY_SUBSCR: {
    VariablePtr key = pop(frame);
    VariablePtr subject = pop(frame);
    VariablePtr container = builtinContents(subject, "__getitem__");
    if (container != subject && container->is(Kind::Dict)) {
      // A dict subclass made in the frame: a missing key goes to its
      // __missing__ (defaultdict's factory).
      std::optional<py::object> constantKey = asConstant(key);
      if (!constantKey || findKey(container, *constantKey) < 0)
        if (VariablePtr made = missingItem(subject, key)) {
          frame.stack.push_back(made);
          return;
        }
    }
    std::optional<py::object> constantKey = asConstant(key);
    switch (container->kind) {
    case Kind::Tensor:
      frame.stack.push_back(
          torchCall(h.operatorModule.attr("getitem"), {container, key}, {}));
      return;
    case Kind::Tuple:
    case Kind::List: {
      if (!constantKey)
        unsupported("indexing a sequence with a non-constant");
      if (PySlice_Check(constantKey->ptr())) {
        py::list indices;
        for (size_t i = 0; i < container->items.size(); ++i)
          indices.append(py::int_(i));
        std::vector<VariablePtr> items;
        for (py::handle index : indices[*constantKey])
          items.push_back(container->items[index.cast<size_t>()]);
        frame.stack.push_back(
            Variable::sequence(container->kind, std::move(items)));
        return;
      }
      frame.stack.push_back(container->items[sequenceIndex(
          constantKey->cast<int64_t>(), container->items.size(), "")]);
      return;
    }
    case Kind::Dict: {
      if (!constantKey)
        unsupported("a dict key that is not a constant");
      for (size_t i = 0; i < container->keys.size(); ++i)
        if (container->keys[i].equal(*constantKey)) {
          frame.stack.push_back(container->items[i]);
          return;
        }
      raisePython(PyExc_KeyError, *constantKey);
    }
    case Kind::Constant:
      if (constantKey) {
        frame.stack.push_back(wrap(container->object[*constantKey], nullptr));
        return;
      }
      break;
    case Kind::Module:
      if (constantKey && PySlice_Check(constantKey->ptr()) &&
          py::isinstance(container->object,
                         h.torch.attr("nn").attr("ModuleList")) &&
          container->source) {
        // A slice of a ModuleList: its modules, each read by index.
        py::list positions;
        for (size_t i = 0; i < py::len(container->object); ++i)
          positions.append(py::int_(i));
        GuardCheck length{GuardCheck::Kind::Length, {}, {}};
        length.length = py::len(container->object);
        guards_.addCheck(container->source, length);
        std::vector<VariablePtr> modules;
        for (py::handle position : positions[*constantKey])
          modules.push_back(
              wrap(container->object[position],
                   Source::item(container->source,
                                py::reinterpret_borrow<py::object>(position))));
        frame.stack.push_back(Variable::sequence(Kind::List, modules));
        return;
      }
      if (constantKey) {
        py::object item = container->object[*constantKey];
        SourcePtr source =
            container->source && !PySlice_Check(constantKey->ptr())
                ? Source::item(container->source, *constantKey)
                : nullptr;
        frame.stack.push_back(wrap(item, source));
        return;
      }
      break;
    default:
      if (container->is(Kind::Object) && container->object.is(h.environment)) {
        frame.stack.push_back(readEnvironment(container, key, nullptr));
        return;
      }
      if (constantKey && container->object &&
          PyType_Check(container->object.ptr()) &&
          PyObject_IsSubclass(container->object.ptr(), h.enumType.ptr()) == 1) {
        // Color["RED"]: the member named (a constant).
        frame.stack.push_back(Variable::constant(
            container->object.attr("__getitem__")(*constantKey)));
        return;
      }
      PyErr_Clear();
      if (VariablePtr item =
              callPythonSpecialMethod(container, "__getitem__", {key})) {
        frame.stack.push_back(item);
        return;
      }
      break;
    }
    unsupported("indexing a " + kindNameOf(pythonTypeOf(container)));
  }
  case Opcode::BINARY_SLICE: {
    VariablePtr stop = pop(frame);
    VariablePtr start = pop(frame);
    auto slice = Variable::constant(py::reinterpret_steal<py::object>(
        PySlice_New(asConstant(start).value().ptr(),
                    asConstant(stop).value().ptr(), nullptr)));
    frame.stack.push_back(slice);
    Instruction subscript = instruction;
    subscript.opcode = Opcode::BINARY_SUBSCR;
    execute(frame, subscript);
    return;
  }
  case Opcode::STORE_SUBSCR: {
    VariablePtr key = pop(frame);
    VariablePtr container = builtinContents(pop(frame), "__setitem__");
    VariablePtr value = pop(frame);
    if (callPythonSpecialMethod(container, "__setitem__", {key, value}))
      return;
    if (container->is(Kind::Tensor)) {
      torchCall(h.operatorModule.attr("setitem"), {container, key, value}, {});
      return;
    }
    std::optional<py::object> constantKey = asConstant(key);
    if (!constantKey)
      unsupported("a subscript assignment with a non-constant key");
    if (container->is(Kind::List) && PySlice_Check(constantKey->ptr())) {
      assignListSlice(container, *constantKey, value);
      return;
    }
    if (container->is(Kind::List)) {
      checkNotInput(container, "assigning into");
      container
          ->items[sequenceIndex(constantKey->cast<int64_t>(),
                                container->items.size(), "list assignment ")] =
          value;
      return;
    }
    if (container->is(Kind::Dict)) {
      checkNotInput(container, "assigning into");
      for (size_t i = 0; i < container->keys.size(); ++i)
        if (container->keys[i].equal(*constantKey)) {
          container->items[i] = value;
          return;
        }
      container->keys.push_back(*constantKey);
      container->items.push_back(value);
      return;
    }
    unsupported("assigning into a " + kindNameOf(pythonTypeOf(container)));
  }
  case Opcode::PUSH_EXC_INFO: {
    // Entering an except block: the exception handled before it goes
    // below, restored by POP_EXCEPT.
    VariablePtr exception = pop(frame);
    frame.stack.push_back(handling_ ? handling_
                                    : Variable::constant(py::none()));
    frame.stack.push_back(exception);
    handling_ = exception;
    return;
  }
  case Opcode::POP_EXCEPT: {
    VariablePtr previous = pop(frame);
    handling_ = previous->is(Kind::Constant) && previous->object.is_none()
                    ? nullptr
                    : previous;
    return;
  }
  case Opcode::CHECK_EXC_MATCH: {
    VariablePtr type = pop(frame);
    std::optional<py::object> types = asConstant(type);
    std::optional<py::object> exception = asConstant(frame.stack.back());
    if (!types || !exception)
      unsupported("an except clause matching a " +
                  kindNameOf(pythonTypeOf(type)));
    int matches = PyObject_IsInstance(exception->ptr(), types->ptr());
    if (matches < 0)
      throw py::error_already_set();
    frame.stack.push_back(Variable::constant(py::bool_(matches == 1)));
    return;
  }
  case Opcode::RERAISE: {
    VariablePtr exception = pop(frame);
    if (instruction.arg)
      pop(frame); // the offset CPython sets f_lasti from
    std::optional<py::object> value = asConstant(exception);
    if (!value || !PyExceptionInstance_Check(value->ptr()))
      unsupported("re-raising a " + kindNameOf(pythonTypeOf(exception)));
    throw PythonException{*value};
  }
  case Opcode::WITH_EXCEPT_START: {
    // An exception leaving a `with` block: __exit__(type, value, None)
    // (no traceback during capture) decides whether it is suppressed.
    VariablePtr exception = frame.stack.back();
    VariablePtr exit = frame.stack[frame.stack.size() - 4];
    std::optional<py::object> value = asConstant(exception);
    if (!value)
      unsupported("an exception of a " + kindNameOf(pythonTypeOf(exception)) +
                  " leaving a `with`");
    frame.stack.push_back(call(exit,
                               {Variable::constant(py::type::of(*value)),
                                exception, Variable::constant(py::none())},
                               {}));
    return;
  }
  case Opcode::MATCH_SEQUENCE:
  case Opcode::MATCH_MAPPING: {
    // `case [a, b]:` / `case {"k": v}:` ask whether the subject is a
    // sequence (not text) or a mapping, as collections.abc says.
    bool sequence = instruction.opcode == Opcode::MATCH_SEQUENCE;
    const VariablePtr &subject = frame.stack.back();
    py::object abc = py::module_::import("collections.abc")
                         .attr(sequence ? "Sequence" : "Mapping");
    bool matches;
    if (subject->is(Kind::List) || subject->is(Kind::Tuple))
      matches = sequence;
    else if (subject->is(Kind::Dict))
      matches = !sequence;
    else if (subject->is(Kind::Tensor) || subject->is(Kind::Set) ||
             subject->is(Kind::Iterator) || subject->is(Kind::Function))
      matches = false;
    else if (subject->is(Kind::Instance))
      matches = PyObject_IsSubclass(subject->object.ptr(), abc.ptr()) == 1;
    else if ((subject->is(Kind::Constant) || subject->is(Kind::Object)) &&
             subject->object)
      matches = py::isinstance(subject->object, abc) &&
                !(sequence && (PyUnicode_Check(subject->object.ptr()) ||
                               PyBytes_Check(subject->object.ptr()) ||
                               PyByteArray_Check(subject->object.ptr())));
    else
      unsupported("a match against a " + kindNameOf(pythonTypeOf(subject)));
    frame.stack.push_back(Variable::constant(py::bool_(matches)));
    return;
  }
  case Opcode::GET_LEN:
    frame.stack.push_back(
        call(Variable::constant(h.builtin("len")), {frame.stack.back()}, {}));
    return;
  case Opcode::MATCH_KEYS: {
    // The values of the keys (a constant tuple) the subject below holds,
    // or None where one is missing.
    std::optional<py::object> keys = asConstant(frame.stack.back());
    const VariablePtr &subject = frame.stack[frame.stack.size() - 2];
    if (!keys || !subject->is(Kind::Dict))
      unsupported("a mapping pattern on a " +
                  kindNameOf(pythonTypeOf(subject)));
    std::vector<VariablePtr> values;
    for (py::handle key : *keys) {
      int index = findKey(subject, key);
      if (index < 0) {
        frame.stack.push_back(Variable::constant(py::none()));
        return;
      }
      values.push_back(subject->items[size_t(index)]);
    }
    frame.stack.push_back(Variable::sequence(Kind::Tuple, std::move(values)));
    return;
  }
  case Opcode::MATCH_CLASS: {
    // `case C(p, q, k=r):` below a subject: the attributes the patterns
    // match (C.__match_args__ for the positional ones, then the keywords)
    // as a tuple where the subject is a C that has them all, else None.
    std::optional<py::object> keywords = asConstant(pop(frame));
    VariablePtr cls = pop(frame);
    VariablePtr subject = pop(frame);
    std::optional<py::object> type = asConstant(cls);
    if (!keywords || !type || !PyType_Check(type->ptr()))
      unsupported("a class pattern whose class is not a constant");
    if (!truthy(call(Variable::constant(h.builtin("isinstance")),
                     {subject, cls}, {}))) {
      frame.stack.push_back(Variable::constant(py::none()));
      return;
    }
    std::vector<std::string> names;
    size_t positional = static_cast<size_t>(instruction.arg);
    std::vector<VariablePtr> values;
    if (positional > 0) {
      py::object matchArgs = py::getattr(*type, "__match_args__", py::none());
      // bool, int, str, list, ... match a single positional pattern against
      // the subject itself.
      static const char *const selfMatching[] = {
          "bool", "bytearray", "bytes", "dict", "float", "frozenset",
          "int",  "list",      "set",   "str",  "tuple"};
      bool self = false;
      for (const char *name : selfMatching)
        self = self || type->is(h.builtin(name));
      if (matchArgs.is_none() && self && positional == 1)
        values.push_back(subject);
      else if (!PyTuple_Check(matchArgs.ptr()) ||
               PyTuple_GET_SIZE(matchArgs.ptr()) <
                   static_cast<Py_ssize_t>(positional))
        unsupported("a class pattern with more positional patterns than " +
                    kindNameOf(*type) + " matches (a TypeError)");
      else
        for (size_t i = 0; i < positional; ++i)
          names.push_back(py::str(py::tuple(matchArgs)[i]).cast<std::string>());
    }
    for (py::handle name : *keywords)
      names.push_back(py::str(name).cast<std::string>());
    for (size_t i = 0; i < names.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (names[i] == names[j])
          unsupported("a class pattern naming attribute " + names[i] +
                      " twice (a TypeError)");
    for (const std::string &name : names) {
      if (!truthy(hasAttribute(subject, name))) {
        frame.stack.push_back(Variable::constant(py::none()));
        return;
      }
      values.push_back(loadAttr(subject, name));
    }
    frame.stack.push_back(Variable::sequence(Kind::Tuple, std::move(values)));
    return;
  }
  case Opcode::DELETE_SUBSCR: {
    VariablePtr key = pop(frame);
    VariablePtr container = builtinContents(pop(frame), "__delitem__");
    if (callPythonSpecialMethod(container, "__delitem__", {key}))
      return;
    if (container->is(Kind::Tensor))
      unsupported("del of a tensor's item");
    std::optional<py::object> constantKey = asConstant(key);
    if (!constantKey)
      unsupported("a del with a non-constant key");
    if (container->is(Kind::List)) {
      checkNotInput(container, "deleting from");
      std::vector<VariablePtr> &items = container->items;
      if (PySlice_Check(constantKey->ptr())) {
        Py_ssize_t start, stop, step;
        if (PySlice_Unpack(constantKey->ptr(), &start, &stop, &step) < 0)
          throw py::error_already_set();
        Py_ssize_t length = PySlice_AdjustIndices(
            static_cast<Py_ssize_t>(items.size()), &start, &stop, step);
        std::vector<bool> drop(items.size(), false);
        for (Py_ssize_t i = 0; i < length; ++i)
          drop[static_cast<size_t>(start + i * step)] = true;
        std::vector<VariablePtr> kept;
        for (size_t i = 0; i < items.size(); ++i)
          if (!drop[i])
            kept.push_back(items[i]);
        items = std::move(kept);
        return;
      }
      items.erase(items.begin() + static_cast<std::ptrdiff_t>(sequenceIndex(
                                      constantKey->cast<int64_t>(),
                                      items.size(), "list assignment ")));
      return;
    }
    if (container->is(Kind::Dict)) {
      checkNotInput(container, "deleting from");
      int index = findKey(container, *constantKey);
      if (index < 0)
        raisePython(PyExc_KeyError, *constantKey);
      container->keys.erase(container->keys.begin() + index);
      container->items.erase(container->items.begin() + index);
      return;
    }
    unsupported("deleting from a " + kindNameOf(pythonTypeOf(container)));
  }
  case Opcode::STORE_SLICE: {
    VariablePtr stop = pop(frame);
    VariablePtr start = pop(frame);
    VariablePtr container = pop(frame);
    VariablePtr value = pop(frame);
    auto slice = Variable::constant(py::reinterpret_steal<py::object>(
        PySlice_New(asConstant(start).value().ptr(),
                    asConstant(stop).value().ptr(), nullptr)));
    if (container->is(Kind::List)) {
      assignListSlice(container, slice->object, value);
      return;
    }
    if (!container->is(Kind::Tensor))
      unsupported("slice assignment into a " +
                  kindNameOf(pythonTypeOf(container)));
    torchCall(h.operatorModule.attr("setitem"), {container, slice, value}, {});
    return;
  }
  case Opcode::BUILD_SLICE: {
    std::vector<VariablePtr> parts = popN(frame, instruction.arg);
    std::vector<py::object> values;
    for (const VariablePtr &part : parts) {
      std::optional<py::object> constant = asConstant(part);
      if (!constant)
        unsupported("a slice with a non-constant bound");
      values.push_back(*constant);
    }
    PyObject *slice =
        PySlice_New(values[0].ptr(), values[1].ptr(),
                    values.size() > 2 ? values[2].ptr() : nullptr);
    frame.stack.push_back(
        Variable::constant(py::reinterpret_steal<py::object>(slice)));
    return;
  }
  case Opcode::BUILD_TUPLE:
    frame.stack.push_back(
        Variable::sequence(Kind::Tuple, popN(frame, instruction.arg)));
    return;
  case Opcode::BUILD_LIST:
    frame.stack.push_back(
        Variable::sequence(Kind::List, popN(frame, instruction.arg)));
    return;
  case Opcode::BUILD_MAP: {
    std::vector<VariablePtr> items = popN(frame, 2 * instruction.arg);
    auto dict = Variable::make(Kind::Dict);
    for (size_t i = 0; i < items.size(); i += 2) {
      std::optional<py::object> key = asConstant(items[i]);
      if (!key)
        unsupported("a dict key that is not a constant");
      dict->keys.push_back(specializeSizes(*key));
      dict->items.push_back(items[i + 1]);
    }
    frame.stack.push_back(dict);
    return;
  }
  case Opcode::BUILD_CONST_KEY_MAP: {
    VariablePtr keys = pop(frame);
    std::vector<VariablePtr> values = popN(frame, instruction.arg);
    auto dict = Variable::make(Kind::Dict);
    for (py::handle key : keys->object)
      dict->keys.push_back(py::reinterpret_borrow<py::object>(key));
    dict->items = std::move(values);
    frame.stack.push_back(dict);
    return;
  }
  case Opcode::BUILD_STRING: {
    std::vector<VariablePtr> parts = popN(frame, instruction.arg);
    std::string text;
    for (const VariablePtr &part : parts)
      text += asConstant(part).value().cast<std::string>();
    frame.stack.push_back(Variable::constant(py::str(text)));
    return;
  }
  case Opcode::FORMAT_VALUE: {
    py::object spec = py::str("");
    if (instruction.arg & 4)
      spec = asConstant(pop(frame)).value();
    VariablePtr value = pop(frame);
    std::optional<py::object> constant = asConstant(value);
    if (!constant || value->is(Kind::Module))
      unsupported("formatting a " + kindNameOf(pythonTypeOf(value)) +
                  " in an f-string");
    py::object object = specializeSizes(*constant);
    int conversion = instruction.arg & 3;
    if (conversion == 1)
      object = py::str(object);
    else if (conversion == 2)
      object = py::repr(object);
    else if (conversion == 3)
      object = h.builtin("ascii")(object);
    frame.stack.push_back(
        Variable::constant(h.builtin("format")(object, spec)));
    return;
  }
  case Opcode::BUILD_SET: {
    VariablePtr set = setFromObject(py::tuple());
    for (const VariablePtr &item : popN(frame, instruction.arg))
      addToSet(set, item);
    frame.stack.push_back(set);
    return;
  }
  case Opcode::SET_ADD: {
    VariablePtr value = pop(frame);
    VariablePtr &set = peek(frame, instruction.arg);
    if (!set->is(Kind::Set))
      unsupported("SET_ADD to a " + kindNameOf(pythonTypeOf(set)));
    addToSet(set, value);
    return;
  }
  case Opcode::SET_UPDATE: {
    VariablePtr values = pop(frame);
    VariablePtr &set = peek(frame, instruction.arg);
    if (!set->is(Kind::Set))
      unsupported("SET_UPDATE of a " + kindNameOf(pythonTypeOf(set)));
    for (const VariablePtr &item : unpack(values))
      addToSet(set, item);
    return;
  }
  case Opcode::LIST_APPEND: {
    VariablePtr value = pop(frame);
    peek(frame, instruction.arg)->items.push_back(value);
    return;
  }
  case Opcode::LIST_EXTEND: {
    VariablePtr values = pop(frame);
    VariablePtr &list = peek(frame, instruction.arg);
    for (const VariablePtr &item : unpack(values))
      list->items.push_back(item);
    return;
  }
  case Opcode::MAP_ADD: {
    VariablePtr value = pop(frame);
    VariablePtr key = pop(frame);
    VariablePtr &dict = peek(frame, instruction.arg);
    std::optional<py::object> constantKey = asConstant(key);
    if (!constantKey)
      unsupported("a dict key that is not a constant");
    dict->keys.push_back(*constantKey);
    dict->items.push_back(value);
    return;
  }
  case Opcode::DICT_UPDATE:
  case Opcode::DICT_MERGE: {
    VariablePtr update = pop(frame);
    VariablePtr &dict = peek(frame, instruction.arg);
    if (!update->is(Kind::Dict))
      unsupported("dict update from a " + kindNameOf(pythonTypeOf(update)));
    for (size_t i = 0; i < update->keys.size(); ++i) {
      bool replaced = false;
      for (size_t j = 0; j < dict->keys.size(); ++j)
        if (dict->keys[j].equal(update->keys[i])) {
          dict->items[j] = update->items[i];
          replaced = true;
        }
      if (!replaced) {
        dict->keys.push_back(update->keys[i]);
        dict->items.push_back(update->items[i]);
      }
    }
    return;
  }
  case Opcode::UNPACK_SEQUENCE: {
    std::vector<VariablePtr> items = unpack(pop(frame));
    if (static_cast<int>(items.size()) != instruction.arg)
      unsupported("unpacking " + std::to_string(items.size()) +
                  " values into " + std::to_string(instruction.arg));
    for (auto it = items.rbegin(); it != items.rend(); ++it)
      frame.stack.push_back(*it);
    return;
  }
  case Opcode::UNPACK_EX: {
    std::vector<VariablePtr> items = unpack(pop(frame));
    size_t before = instruction.arg & 0xff, after = instruction.arg >> 8;
    if (items.size() < before + after)
      unsupported("not enough values to unpack");
    std::vector<VariablePtr> middle(items.begin() + before,
                                    items.end() - after);
    for (size_t i = 0; i < after; ++i)
      frame.stack.push_back(items[items.size() - 1 - i]);
    frame.stack.push_back(Variable::sequence(Kind::List, std::move(middle)));
    for (size_t i = before; i-- > 0;)
      frame.stack.push_back(items[i]);
    return;
  }
  case Opcode::GET_ITER:
    frame.stack.push_back(iterate(pop(frame)));
    return;
  case Opcode::FOR_ITER: {
    VariablePtr iterator = peek(frame);
    if (!iterator->is(Kind::Iterator))
      throw Error("FOR_ITER on a non-iterator");
    if (iteratorIsStale(*iterator))
      unsupported("a loop over a list the loop changes");
    if (iterator->position < iterator->items.size()) {
      frame.stack.push_back(iterator->items[iterator->position++]);
      return;
    }
    pop(frame);
    frame.pc = instruction.jumpTarget;
    // 3.12 jumps over the END_FOR that the target names.
    if (frame.pc < frame.code->instructions.size() &&
        frame.code->instructions[frame.pc].opcode == Opcode::END_FOR)
      ++frame.pc;
    return;
  }
  case Opcode::JUMP_FORWARD:
  case Opcode::JUMP_BACKWARD:
  case Opcode::JUMP_BACKWARD_NO_INTERRUPT:
  case Opcode::JUMP:
    jump(frame, instruction);
    return;
  case Opcode::POP_JUMP_IF_FALSE:
  case Opcode::POP_JUMP_FORWARD_IF_FALSE:
  case Opcode::POP_JUMP_BACKWARD_IF_FALSE:
    if (!truthy(pop(frame)))
      jump(frame, instruction);
    return;
  case Opcode::POP_JUMP_IF_TRUE:
  case Opcode::POP_JUMP_FORWARD_IF_TRUE:
  case Opcode::POP_JUMP_BACKWARD_IF_TRUE:
    if (truthy(pop(frame)))
      jump(frame, instruction);
    return;
  case Opcode::POP_JUMP_IF_NONE:
  case Opcode::POP_JUMP_FORWARD_IF_NONE:
  case Opcode::POP_JUMP_BACKWARD_IF_NONE:
  case Opcode::POP_JUMP_IF_NOT_NONE:
  case Opcode::POP_JUMP_FORWARD_IF_NOT_NONE:
  case Opcode::POP_JUMP_BACKWARD_IF_NOT_NONE: {
    VariablePtr value = pop(frame);
    bool isNone = value->is(Kind::Constant) && value->object.is_none();
    bool wantNone = instruction.opcode == Opcode::POP_JUMP_IF_NONE ||
                    instruction.opcode == Opcode::POP_JUMP_FORWARD_IF_NONE ||
                    instruction.opcode == Opcode::POP_JUMP_BACKWARD_IF_NONE;
    if (isNone == wantNone)
      jump(frame, instruction);
    return;
  }
  case Opcode::JUMP_IF_FALSE_OR_POP:
    if (!truthy(peek(frame)))
      jump(frame, instruction);
    else
      pop(frame);
    return;
  case Opcode::JUMP_IF_TRUE_OR_POP:
    if (truthy(peek(frame)))
      jump(frame, instruction);
    else
      pop(frame);
    return;
  case Opcode::KW_NAMES:
    frame.kwnames = instruction.argval;
    return;
  case Opcode::CALL: {
    // super() with no arguments reads the enclosing method's class cell.
    size_t count = instruction.arg;
    VariablePtr callable = peek(frame, count + 1);
    VariablePtr below = peek(frame, count + 2);
    if (count == 0 && below->is(Kind::Null) && callable->is(Kind::Callable) &&
        callable->object.is(h.builtin("super"))) {
      int classSlot = -1;
      for (size_t i = 0; i < frame.localNames.size(); ++i)
        if (frame.localNames[i] == "__class__")
          classSlot = static_cast<int>(i);
      if (classSlot < 0 || (!frame.locals[0] && !frame.isRoot))
        unsupported("super() outside a method");
      VariablePtr cell = frame.locals.at(classSlot);
      py::object cls;
      if (cell && cell->is(Kind::Cell) && cell->object)
        cls = py::reinterpret_steal<py::object>(PyCell_Get(cell->object.ptr()));
      if (!cls)
        unsupported("super() without a __class__ cell");
      VariablePtr self = local(frame, 0);
      if (self->is(Kind::Cell))
        self = self->items.at(0);
      popN(frame, 2);
      auto super = Variable::make(Kind::Super);
      super->object = cls;
      super->items.push_back(self);
      frame.stack.push_back(super);
      return;
    }
    doCall(frame, count);
    return;
  }
  case Opcode::CALL_FUNCTION_EX: {
    VariablePtr kwargsVariable = instruction.arg & 1 ? pop(frame) : nullptr;
    VariablePtr argsVariable = pop(frame);
    VariablePtr callable = pop(frame);
    VariablePtr null = pop(frame);
    std::vector<VariablePtr> args = unpack(argsVariable);
    if (!null->is(Kind::Null)) {
      args.insert(args.begin(), callable);
      callable = null;
    }
    std::vector<std::pair<std::string, VariablePtr>> kwargs;
    if (kwargsVariable) {
      if (!kwargsVariable->is(Kind::Dict))
        unsupported("** of a " + kindNameOf(pythonTypeOf(kwargsVariable)));
      for (size_t i = 0; i < kwargsVariable->keys.size(); ++i)
        kwargs.emplace_back(kwargsVariable->keys[i].cast<std::string>(),
                            kwargsVariable->items[i]);
    }
    frame.stack.push_back(call(callable, std::move(args), std::move(kwargs)));
    return;
  }
  case Opcode::MAKE_FUNCTION: {
    VariablePtr code = pop(frame);
    auto function = Variable::make(Kind::Function);
    function->code = code->object;
    function->globals = frame.globals;
    function->kwdefaults = py::none();
    if (instruction.arg & 0x08)
      function->cells = pop(frame)->items;
    if (instruction.arg & 0x04)
      pop(frame); // annotations
    if (instruction.arg & 0x02) {
      VariablePtr kwdefaults = pop(frame);
      std::optional<py::object> constant = asConstant(kwdefaults);
      if (!constant)
        unsupported("keyword-only defaults that are not constants");
      function->kwdefaults = *constant;
    }
    if (instruction.arg & 0x01)
      function->items = unpack(pop(frame));
    frame.stack.push_back(function);
    return;
  }
  case Opcode::BEFORE_WITH: {
    VariablePtr context = pop(frame);
    if (context->is(Kind::Instance) || context->is(Kind::Object)) {
      // A context manager written in Python (contextlib.nullcontext, a
      // class of the user's): its __enter__ and, at the block's end, its
      // __exit__ are inlined like any method.
      py::object type = pythonTypeOf(context);
      for (const char *method : {"__enter__", "__exit__"})
        if (!PyFunction_Check(py::getattr(type, method, py::none()).ptr()))
          unsupported("a `with` block over a " + kindNameOf(type) + " whose " +
                      method + " is not a Python function");
      VariablePtr exit = loadAttr(context, "__exit__");
      VariablePtr entered = call(loadAttr(context, "__enter__"), {}, {});
      frame.stack.push_back(exit);
      frame.stack.push_back(entered);
      return;
    }
    if (!context->is(Kind::GradContext))
      unsupported("a `with` block over a " + kindNameOf(pythonTypeOf(context)));
    auto restore = Variable::make(Kind::GradRestore);
    // set_grad_enabled switched the mode when called: its exit restores the
    // mode from before that call.
    restore->flag = context->name == "set_grad_enabled" ? context->position != 0
                                                        : gradEnabled_;
    setGradMode(context->flag);
    frame.stack.push_back(restore);
    frame.stack.push_back(Variable::constant(py::none()));
    return;
  }
  case Opcode::LOAD_BUILD_CLASS:
    // A class statement: builtins.__build_class__(body, name, *bases),
    // which the call dispatch runs as defineClass.
    frame.stack.push_back(wrap(h.builtin("__build_class__"), nullptr));
    return;
  case Opcode::LOAD_ASSERTION_ERROR:
    frame.stack.push_back(wrap(h.builtin("AssertionError"), nullptr));
    return;
  case Opcode::RAISE_VARARGS: {
    // raise (re-raise what is handled), raise X, raise X from Y: X an
    // exception class (instantiated) or instance; try blocks may catch it.
    VariablePtr cause = instruction.arg == 2 ? pop(frame) : nullptr;
    if (instruction.arg == 0) {
      std::optional<py::object> current =
          handling_ ? asConstant(handling_) : std::nullopt;
      if (!current)
        unsupported("a bare raise outside an except block");
      throw PythonException{*current};
    }
    VariablePtr raised = pop(frame);
    std::optional<py::object> value = asConstant(raised);
    if (value && PyExceptionClass_Check(value->ptr()))
      value = (*value)();
    if (!value || !PyExceptionInstance_Check(value->ptr()))
      unsupported("raising a " + kindNameOf(pythonTypeOf(raised)));
    if (cause) {
      std::optional<py::object> from = asConstant(cause);
      if (!from)
        unsupported("raise ... from a " + kindNameOf(pythonTypeOf(cause)));
      if (PyExceptionClass_Check(from->ptr()))
        from = (*from)();
      PyException_SetCause(value->ptr(), from->inc_ref().ptr());
    }
    throw PythonException{*value};
  }
  case Opcode::RETURN_GENERATOR:
    // The generator object's creation: the POP_TOP after it drops this.
    frame.stack.push_back(Variable::constant(py::none()));
    return;
  case Opcode::YIELD_VALUE:
    frame.yielded.push_back(pop(frame));
    frame.stack.push_back(Variable::constant(py::none())); // the value sent in
    return;
  case Opcode::IMPORT_NAME: {
    // Importing a module that is already loaded has no side effect: the
    // statement only names it. A first import runs module code: CPython's.
    VariablePtr fromlist = pop(frame);
    VariablePtr level = pop(frame);
    std::string name = instruction.argval.cast<std::string>();
    int64_t depth = asConstant(level).value().cast<int64_t>();
    py::module_ sys = py::module_::import("sys");
    if (depth > 0) {
      py::object package = frame.globals.attr("get")("__package__", py::none());
      if (package.is_none())
        unsupported("a relative import outside a package");
      name = py::module_::import("importlib.util")
                 .attr("resolve_name")(std::string(depth, '.') + name, package)
                 .cast<std::string>();
    }
    bool hasFromlist =
        !(fromlist->is(Kind::Constant) && fromlist->object.is_none());
    std::string loaded = hasFromlist ? name : name.substr(0, name.find('.'));
    py::object module = sys.attr("modules").attr("get")(loaded, py::none());
    if (module.is_none() ||
        sys.attr("modules").attr("get")(name, py::none()).is_none())
      unsupported("importing " + name + ", which is not loaded yet");
    frame.stack.push_back(wrap(module, nullptr));
    return;
  }
  case Opcode::IMPORT_FROM:
    frame.stack.push_back(
        loadAttr(peek(frame), instruction.argval.cast<std::string>()));
    return;
  default:
    unsupported("the bytecode instruction " + instruction.opname);
  }
}

void Evaluator::assignListSlice(const VariablePtr &list, py::handle slice,
                                const VariablePtr &value) {
  checkNotInput(list, "assigning into");
  std::vector<VariablePtr> replacement = unpack(value);
  // Python's own slice assignment on positions: old items by index, new
  // ones numbered after them (extended slices, bounds and errors as Python
  // has them).
  size_t count = list->items.size();
  py::list positions;
  for (size_t i = 0; i < count; ++i)
    positions.append(py::int_(i));
  py::list added;
  for (size_t i = 0; i < replacement.size(); ++i)
    added.append(py::int_(count + i));
  if (PyObject_SetItem(positions.ptr(), slice.ptr(), added.ptr()) < 0) {
    py::error_already_set error;
    unsupported(std::string("a slice assignment that raises: ") + error.what());
  }
  std::vector<VariablePtr> items;
  for (py::handle position : positions) {
    size_t index = position.cast<size_t>();
    items.push_back(index < count ? list->items[index]
                                  : replacement[index - count]);
  }
  list->items = std::move(items);
}

} // namespace kiln::frontend::evaluation
