// The symbolic evaluator: runs bytecode over variable trackers, building a
// graph and guards. Torch calls (functions, tensor methods, operators,
// indexing) are recorded on meta tensors by kiln._trace and appended as the
// ATen ops eager PyTorch runs. Depends on frontend/, ir/, passes/,
// runtime/PythonConversion.h, pybind11, CPython.
#include "frontend/SymbolicEvaluator.h"

#include "frontend/AtenCall.h"
#include "frontend/Bytecode.h"
#include "ir/Error.h"
#include "passes/DeadCodeElimination.h"
#include "runtime/PythonConversion.h"

#include <pybind11/stl.h>

#include <unordered_map>
#include <unordered_set>

namespace kiln::frontend {
namespace {

using Kind = Variable::Kind;

constexpr int kMaxInlineDepth = 64;
constexpr long kMaxInstructions = 200000;

// Python objects the evaluator recognises by identity.
struct Handles {
  py::module_ builtins = py::module_::import("builtins");
  py::module_ operatorModule = py::module_::import("operator");
  py::module_ torch = py::module_::import("torch");
  py::module_ trace = py::module_::import("kiln._trace");
  py::object traceCall = trace.attr("trace");
  py::object metaTensor = trace.attr("meta_tensor");
  py::object tensorType = torch.attr("Tensor");
  py::object moduleBase = torch.attr("nn").attr("Module");
  py::object moduleCall = moduleBase.attr("__call__");
  py::object sizeType = torch.attr("Size");
  py::object noGrad = torch.attr("no_grad");
  py::object enableGrad = torch.attr("enable_grad");
  py::object isGradEnabled = torch.attr("is_grad_enabled");
  py::object tensorFromData = torch.attr("tensor");
  py::object asTensor = torch.attr("as_tensor");
  py::object functionType = py::module_::import("types").attr("FunctionType");
  py::object methodType = py::module_::import("types").attr("MethodType");
  py::object moduleType = py::module_::import("types").attr("ModuleType");
  py::object cellType = py::module_::import("types").attr("CellType");
  py::object codeType = py::module_::import("types").attr("CodeType");
  py::object dtypeType = torch.attr("dtype");
  py::object deviceType = torch.attr("device");
  py::object nnModules = torch.attr("nn").attr("modules").attr("module");
  // Functions that ask whether torch-function overrides are active: kiln's
  // values are plain tensors, so the answer is no.
  std::vector<py::object> alwaysFalse = {
      torch.attr("_C").attr("_has_torch_function"),
      torch.attr("_C").attr("_has_torch_function_unary"),
      torch.attr("_C").attr("_has_torch_function_variadic"),
      torch.attr("jit").attr("is_scripting"),
      torch.attr("jit").attr("is_tracing"),
      torch.attr("compiler").attr("is_compiling"),
      torch.attr("_dynamo").attr("is_compiling"),
  };
  // Builtins that have no side effects: with constant arguments they are
  // evaluated during capture.
  std::unordered_set<PyObject *> pureBuiltins;

  Handles() {
    for (const char *name :
         {"abs",     "all",    "any",      "bool",       "callable",
          "chr",     "divmod", "float",    "format",     "frozenset",
          "hasattr", "hash",   "int",      "isinstance", "issubclass",
          "len",     "max",    "min",      "ord",        "pow",
          "range",   "repr",   "reversed", "round",      "slice",
          "sorted",  "str",    "sum",      "tuple",      "type",
          "getattr", "list",   "dict",     "set",        "enumerate",
          "zip"})
      pureBuiltins.insert(builtins.attr(name).ptr());
  }
  static const Handles &get() {
    static const Handles *handles = new Handles();
    return *handles;
  }
  py::object builtin(const char *name) const { return builtins.attr(name); }
};

bool isConstantObject(py::handle object) {
  const Handles &h = Handles::get();
  PyObject *o = object.ptr();
  if (o == Py_None || o == Py_Ellipsis || o == Py_NotImplemented ||
      PyBool_Check(o) || PyLong_CheckExact(o) || PyFloat_CheckExact(o) ||
      PyUnicode_CheckExact(o) || PyBytes_CheckExact(o) ||
      PyComplex_CheckExact(o) || PySlice_Check(o) || PyRange_Check(o) ||
      py::isinstance(object, h.dtypeType) ||
      py::isinstance(object, h.deviceType) ||
      py::isinstance(object, h.codeType) ||
      py::isinstance(object, h.torch.attr("memory_format")) ||
      py::isinstance(object, h.torch.attr("layout")))
    return true;
  if (PyTuple_CheckExact(o) || py::isinstance(object, h.sizeType)) {
    for (py::handle item : object)
      if (!isConstantObject(item))
        return false;
    return true;
  }
  return false;
}

std::string typeName(py::handle object);

// The Python type name of what a variable stands for: "list", "Tensor".
std::string kindNameOf(py::handle type) {
  return py::str(type.attr("__name__")).cast<std::string>();
}

std::string typeName(py::handle object) {
  return Py_TYPE(object.ptr())->tp_name;
}

// The module a callable was defined in ("torch.nn.functional", "math").
std::string moduleOf(py::handle callable) {
  py::object module = py::getattr(callable, "__module__", py::none());
  if (module.is_none() || !PyUnicode_Check(module.ptr()))
    return "";
  return module.cast<std::string>();
}

// "G[torch.nn.functional]": the globals of another module, by its name.
std::string globalsName(py::handle globals) {
  py::object name = globals.attr("get")("__name__", py::none());
  if (name.is_none()) // exec'd code: no module name, so the dict's identity
    return "G@" + std::to_string(reinterpret_cast<uintptr_t>(globals.ptr()));
  return "G[" + py::str(name).cast<std::string>() + "]";
}

bool startsWith(const std::string &text, const std::string &prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

bool isTorchModuleName(const std::string &name) {
  return name == "torch" || startsWith(name, "torch.") || name == "math" ||
         name == "operator" || name == "_operator" || name == "builtins" ||
         name == "functools" || name == "itertools" || name == "numbers";
}

class Evaluator {
public:
  explicit Evaluator(const FrameInputs &inputs)
      : inputs_(inputs), graph_(std::make_shared<Graph>()) {
    gradEnabled_ = Handles::get().isGradEnabled().cast<bool>();
  }

  Capture run(py::handle function);

private:
  struct Frame {
    std::shared_ptr<const Bytecode> code;
    py::object codeObject;
    std::vector<VariablePtr> locals;
    std::vector<py::object> rootArguments; // root frame: not yet wrapped
    std::vector<std::string> localNames;
    std::vector<uint8_t> localKinds;
    std::vector<VariablePtr> stack;
    py::object globals;
    py::object builtins;
    bool isRoot = false;
    std::vector<VariablePtr> freeCells;
    py::object kwnames;
    size_t pc = 0;
    VariablePtr returned;
    std::vector<VariablePtr> yielded; // a generator's values, in order
  };

  // --- the interpreter loop -------------------------------------------
  /// Decodes `code` into `frame` and sizes its locals; `globals` is the
  /// function's module dict (its builtins come from there).
  void setUpFrame(Frame &frame, py::object code, py::object globals);
  VariablePtr runFrame(Frame &frame);
  void execute(Frame &frame, const Instruction &instruction);
  VariablePtr pop(Frame &frame) {
    if (frame.stack.empty())
      throw Error("symbolic stack underflow");
    VariablePtr top = std::move(frame.stack.back());
    frame.stack.pop_back();
    return top;
  }
  std::vector<VariablePtr> popN(Frame &frame, size_t n) {
    if (frame.stack.size() < n)
      throw Error("symbolic stack underflow");
    std::vector<VariablePtr> items(frame.stack.end() - n, frame.stack.end());
    frame.stack.resize(frame.stack.size() - n);
    return items;
  }
  VariablePtr &peek(Frame &frame, size_t depth = 1) {
    if (frame.stack.size() < depth)
      throw Error("symbolic stack underflow");
    return frame.stack[frame.stack.size() - depth];
  }
  void jump(Frame &frame, const Instruction &instruction) {
    frame.pc = instruction.jumpTarget;
  }
  VariablePtr local(Frame &frame, int index);
  VariablePtr loadGlobal(Frame &frame, const std::string &name);
  void doCall(Frame &frame, size_t argumentCount);
  void binaryOp(Frame &frame, int op);
  /// `operator.<name>` of one operand: evaluated on a constant, recorded on
  /// a tensor.
  VariablePtr unaryOp(const char *name, const VariablePtr &operand);
  void compareOp(Frame &frame, const std::string &op);

  // --- values -----------------------------------------------------------
  VariablePtr wrap(py::handle object, SourcePtr source);
  VariablePtr wrapTensor(py::handle tensor, const SourcePtr &source);
  VariablePtr loadAttr(const VariablePtr &base, const std::string &name);
  VariablePtr call(const VariablePtr &callable, std::vector<VariablePtr> args,
                   std::vector<std::pair<std::string, VariablePtr>> kwargs);
  VariablePtr
  callBuiltin(py::handle function, std::vector<VariablePtr> &args,
              std::vector<std::pair<std::string, VariablePtr>> &kwargs,
              bool &handled);
  VariablePtr dictReadMethod(const VariablePtr &self, const std::string &name,
                             py::handle attribute);
  VariablePtr readGuardedDict(const VariablePtr &self, const std::string &name,
                              std::vector<VariablePtr> &args);
  VariablePtr callMethodOfContainer(const VariablePtr &self,
                                    const std::string &name,
                                    std::vector<VariablePtr> &args);
  VariablePtr
  callTensorMethod(const VariablePtr &self, const std::string &name,
                   std::vector<VariablePtr> &args,
                   std::vector<std::pair<std::string, VariablePtr>> &kwargs);
  VariablePtr
  inlineFunction(const VariablePtr &function, std::vector<VariablePtr> args,
                 std::vector<std::pair<std::string, VariablePtr>> kwargs);
  VariablePtr
  inlineModule(const VariablePtr &module, std::vector<VariablePtr> args,
               std::vector<std::pair<std::string, VariablePtr>> kwargs);
  VariablePtr
  torchCall(py::handle function, const std::vector<VariablePtr> &args,
            const std::vector<std::pair<std::string, VariablePtr>> &kwargs);
  VariablePtr iterate(const VariablePtr &iterable);
  std::vector<VariablePtr> unpack(const VariablePtr &sequence);
  bool truthy(const VariablePtr &value);
  std::optional<py::object> asConstant(const VariablePtr &value);
  py::object toTraceObject(const VariablePtr &value);
  VariablePtr fromTraceObject(py::handle object);
  py::object metaTensorOf(Value *value);
  py::object pythonTypeOf(const VariablePtr &value);
  void checkNotInput(const VariablePtr &container, const char *what);
  void setGradMode(bool enabled);
  OutputTemplate buildOutput(const VariablePtr &value,
                             std::vector<Argument> &outputs);

  [[noreturn]] void unsupported(const std::string &what) {
    throw Unsupported(what);
  }

  FrameInputs inputs_;
  std::shared_ptr<Graph> graph_;
  GuardTree guards_;
  std::vector<std::string> notes_;
  std::unordered_map<std::string, VariablePtr> bySource_;
  std::unordered_map<Value *, py::object> metaTensors_;
  std::unordered_map<PyObject *, Value *> valueOfMeta_;
  std::vector<py::object> keepAlive_;
  bool gradEnabled_ = true;
  int depth_ = 0;
  long executed_ = 0;
  std::string where_;
};

// ---------------------------------------------------------------------------
// Wrapping Python objects, with guards on where they came from.

VariablePtr Evaluator::wrapTensor(py::handle tensor, const SourcePtr &source) {
  if (!source)
    unsupported("a tensor that is not an input of the function (" +
                typeName(tensor) + " reached without a guardable source)");
  const Handles &h = Handles::get();
  PyTypeObject *type = Py_TYPE(tensor.ptr());
  if (reinterpret_cast<PyObject *>(type) != h.tensorType.ptr() &&
      reinterpret_cast<PyObject *>(type) !=
          h.torch.attr("nn").attr("Parameter").ptr() &&
      reinterpret_cast<PyObject *>(type) !=
          h.torch.attr("nn").attr("parameter").attr("Buffer").ptr())
    unsupported("tensor subclass " + std::string(type->tp_name));
  TensorMeta meta = python::tensorMetaOf(tensor);
  guards_.addCheck(source, tensorMatch(tensor, meta));
  guards_.addGraphInput(source);
  // Name the input after where it came from: L['self'].fc.weight becomes
  // self_fc_weight.
  std::string name;
  for (char c : source->str()) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_')
      name += c;
    else if (!name.empty() && name.back() != '_')
      name += '_';
  }
  if (name.size() > 2 && name[1] == '_' && (name[0] == 'L' || name[0] == 'G'))
    name = name.substr(2);
  while (!name.empty() && name.back() == '_')
    name.pop_back();
  Value *value = graph_->addInput(meta, name);
  return Variable::ofTensor(value);
}

VariablePtr Evaluator::wrap(py::handle object, SourcePtr source) {
  std::string key;
  if (source) {
    key = source->str();
    auto it = bySource_.find(key);
    if (it != bySource_.end())
      return it->second;
  }
  const Handles &h = Handles::get();
  VariablePtr result;
  auto guard = [&](GuardCheck check) {
    if (source)
      guards_.addCheck(source, std::move(check));
  };
  auto item = [&](py::object key) -> SourcePtr {
    return source ? Source::item(source, std::move(key)) : nullptr;
  };
  if (python::isTensor(object)) {
    result = wrapTensor(object, source);
  } else if (isConstantObject(object)) {
    guard(equalsConstant(object));
    result = Variable::constant(py::reinterpret_borrow<py::object>(object));
  } else if (PyList_CheckExact(object.ptr()) ||
             PyTuple_CheckExact(object.ptr())) {
    bool isList = PyList_CheckExact(object.ptr());
    guard(typeIs(py::type::of(object)));
    GuardCheck length{GuardCheck::Kind::Length, {}, {}};
    length.length = py::len(object);
    guard(length);
    std::vector<VariablePtr> items;
    Py_ssize_t i = 0;
    for (py::handle element : object)
      items.push_back(wrap(element, item(py::int_(i++))));
    result =
        Variable::sequence(isList ? Kind::List : Kind::Tuple, std::move(items));
  } else if (PyDict_CheckExact(object.ptr())) {
    guard(typeIs(py::type::of(object)));
    GuardCheck keys{GuardCheck::Kind::DictKeys, {}, {}};
    py::list keyList;
    result = Variable::make(Kind::Dict);
    for (auto entry : py::reinterpret_borrow<py::dict>(object)) {
      if (!isConstantObject(entry.first))
        unsupported("a dict with non-constant keys");
      keyList.append(entry.first);
      result->keys.push_back(py::reinterpret_borrow<py::object>(entry.first));
      result->items.push_back(wrap(
          entry.second, item(py::reinterpret_borrow<py::object>(entry.first))));
    }
    keys.expected = py::tuple(keyList);
    guard(keys);
  } else if (py::isinstance(object, h.moduleBase)) {
    guard(identity(object));
    result = Variable::make(Kind::Module);
    result->object = py::reinterpret_borrow<py::object>(object);
  } else if (py::isinstance(object, h.functionType)) {
    guard(identity(object));
    result = Variable::make(Kind::Function);
    result->object = py::reinterpret_borrow<py::object>(object);
  } else if (py::isinstance(object, h.methodType)) {
    py::object self = object.attr("__self__");
    py::object function = object.attr("__func__");
    if (source)
      guards_.addCheck(Source::attr(source, "__func__"), identity(function));
    result = Variable::make(Kind::Method);
    result->object = function;
    result->items.push_back(
        wrap(self, source ? Source::attr(source, "__self__") : nullptr));
  } else if (py::isinstance(object, h.moduleType)) {
    guard(identity(object));
    result = Variable::make(Kind::PythonModule);
    result->object = py::reinterpret_borrow<py::object>(object);
  } else if (PyCallable_Check(object.ptr())) {
    guard(identity(object));
    result = Variable::make(Kind::Callable);
    result->object = py::reinterpret_borrow<py::object>(object);
  } else {
    guard(typeIs(py::type::of(object)));
    result = Variable::make(Kind::Object);
    result->object = py::reinterpret_borrow<py::object>(object);
  }
  result->source = source;
  if (source)
    bySource_[key] = result;
  return result;
}

// ---------------------------------------------------------------------------
// Constants, truthiness, iteration.

std::optional<py::object> Evaluator::asConstant(const VariablePtr &value) {
  switch (value->kind) {
  case Kind::Constant:
    return value->object;
  case Kind::Tuple:
  case Kind::List: {
    py::list items;
    for (const VariablePtr &item : value->items) {
      std::optional<py::object> constant = asConstant(item);
      if (!constant)
        return std::nullopt;
      items.append(*constant);
    }
    if (value->kind == Kind::List)
      return py::object(items);
    if (value->object && !value->object.is_none())
      return value->object(py::tuple(items));
    return py::object(py::tuple(items));
  }
  case Kind::Dict: {
    py::dict items;
    for (size_t i = 0; i < value->keys.size(); ++i) {
      std::optional<py::object> constant = asConstant(value->items[i]);
      if (!constant)
        return std::nullopt;
      items[value->keys[i]] = *constant;
    }
    return py::object(items);
  }
  case Kind::Callable:
  case Kind::PythonModule:
  case Kind::Function:
  case Kind::Module:
    return value->object;
  default:
    return std::nullopt;
  }
}

bool Evaluator::truthy(const VariablePtr &value) {
  switch (value->kind) {
  case Kind::Constant:
    return PyObject_IsTrue(value->object.ptr()) == 1;
  case Kind::Tuple:
  case Kind::List:
  case Kind::Dict:
    return !value->items.empty();
  case Kind::Tensor:
    unsupported("control flow that depends on a tensor's values (`if tensor`, "
                "`bool(tensor)`)");
  case Kind::Function:
  case Kind::Callable:
  case Kind::PythonModule:
  case Kind::Method:
    return true;
  case Kind::Module:
  case Kind::Object: {
    py::object type = py::type::of(value->object);
    if (!py::hasattr(type, "__bool__") && !py::hasattr(type, "__len__"))
      return true;
    if (value->kind == Kind::Module && py::hasattr(type, "__len__")) {
      if (value->source) {
        GuardCheck length{GuardCheck::Kind::Length, {}, {}};
        length.length = py::len(value->object);
        guards_.addCheck(value->source, length);
      }
      return py::len(value->object) > 0;
    }
    unsupported("truth value of a " + typeName(value->object) + " object");
  }
  default:
    unsupported("truth value of a symbolic " +
                std::to_string(int(value->kind)));
  }
}

VariablePtr Evaluator::iterate(const VariablePtr &iterable) {
  auto iterator = Variable::make(Kind::Iterator);
  switch (iterable->kind) {
  case Kind::Iterator:
    return iterable;
  case Kind::Tuple:
  case Kind::List:
    iterator->items = iterable->items;
    return iterator;
  case Kind::Dict:
    for (const py::object &key : iterable->keys)
      iterator->items.push_back(Variable::constant(key));
    return iterator;
  case Kind::Constant: {
    py::object object = iterable->object;
    if (PyRange_Check(object.ptr()) && py::len(object) > 100000)
      unsupported("iteration over a range of more than 100000 items");
    for (py::handle item : object)
      iterator->items.push_back(
          Variable::constant(py::reinterpret_borrow<py::object>(item)));
    return iterator;
  }
  case Kind::Tensor: {
    VariablePtr items =
        torchCall(Handles::get().builtin("tuple"), {iterable}, {});
    iterator->items = items->items;
    return iterator;
  }
  case Kind::Module: {
    py::object module = iterable->object;
    bool indexable =
        py::hasattr(module, "__getitem__") &&
        !py::isinstance(module,
                        Handles::get().torch.attr("nn").attr("ModuleDict"));
    if (!py::hasattr(module, "__iter__"))
      unsupported("iteration over " + typeName(module));
    if (iterable->source && py::hasattr(module, "__len__")) {
      GuardCheck length{GuardCheck::Kind::Length, {}, {}};
      length.length = py::len(module);
      guards_.addCheck(iterable->source, length);
    }
    int64_t i = 0;
    for (py::handle item : module) {
      SourcePtr source = indexable && iterable->source
                             ? Source::item(iterable->source, py::int_(i))
                             : nullptr;
      iterator->items.push_back(wrap(item, source));
      ++i;
    }
    return iterator;
  }
  default:
    unsupported("iteration over a " + kindNameOf(pythonTypeOf(iterable)));
  }
}

std::vector<VariablePtr> Evaluator::unpack(const VariablePtr &sequence) {
  VariablePtr iterator = iterate(sequence);
  return std::vector<VariablePtr>(iterator->items.begin() + iterator->position,
                                  iterator->items.end());
}

py::object Evaluator::pythonTypeOf(const VariablePtr &value) {
  switch (value->kind) {
  case Kind::Tensor:
    return Handles::get().tensorType;
  case Kind::Tuple:
    return value->object && !value->object.is_none()
               ? value->object
               : py::type::of(py::tuple());
  case Kind::List:
    return py::type::of(py::list());
  case Kind::Dict:
    return py::type::of(py::dict());
  case Kind::Constant:
  case Kind::Module:
  case Kind::Object:
  case Kind::Function:
  case Kind::Callable:
  case Kind::PythonModule:
    return py::type::of(value->object);
  case Kind::Method:
    return Handles::get().methodType;
  default:
    return py::type::of(py::none());
  }
}

void Evaluator::checkNotInput(const VariablePtr &container, const char *what) {
  if (container->source && !container->ownedByFrame)
    unsupported(std::string(what) + " " + container->source->str() +
                ", an object the caller can see: kiln cannot replay that side "
                "effect");
}

// ---------------------------------------------------------------------------
// Torch calls, recorded on meta tensors.

py::object Evaluator::metaTensorOf(Value *value) {
  auto it = metaTensors_.find(value);
  if (it != metaTensors_.end())
    return it->second;
  const TensorMeta &meta = value->meta();
  py::object tensor = Handles::get().metaTensor(
      python::dtypeToTorch(meta.dtype), py::cast(meta.sizes),
      py::cast(meta.strides), meta.storageOffset);
  metaTensors_[value] = tensor;
  valueOfMeta_[tensor.ptr()] = value;
  return tensor;
}

py::object Evaluator::toTraceObject(const VariablePtr &value) {
  switch (value->kind) {
  case Kind::Tensor:
    return metaTensorOf(value->tensor);
  case Kind::Tuple:
  case Kind::List: {
    py::list items;
    for (const VariablePtr &item : value->items)
      items.append(toTraceObject(item));
    if (value->kind == Kind::List)
      return items;
    if (value->object && !value->object.is_none())
      return value->object(py::tuple(items));
    return py::tuple(items);
  }
  case Kind::Dict: {
    py::dict items;
    for (size_t i = 0; i < value->keys.size(); ++i)
      items[value->keys[i]] = toTraceObject(value->items[i]);
    return items;
  }
  case Kind::Constant:
  case Kind::Callable:
  case Kind::PythonModule:
    return value->object;
  default:
    unsupported("passing a " + kindNameOf(pythonTypeOf(value)) +
                " to a torch function");
  }
}

VariablePtr Evaluator::fromTraceObject(py::handle object) {
  if (python::isTensor(object)) {
    auto it = valueOfMeta_.find(object.ptr());
    if (it == valueOfMeta_.end())
      unsupported("a torch call produced a tensor outside the dispatcher "
                  "(e.g. torch.tensor(data))");
    return Variable::ofTensor(it->second);
  }
  if (isConstantObject(object))
    return Variable::constant(py::reinterpret_borrow<py::object>(object));
  if (PyTuple_Check(object.ptr()) || PyList_Check(object.ptr())) {
    std::vector<VariablePtr> items;
    for (py::handle item : object)
      items.push_back(fromTraceObject(item));
    auto result = Variable::sequence(PyList_Check(object.ptr()) ? Kind::List
                                                                : Kind::Tuple,
                                     std::move(items));
    if (PyTuple_Check(object.ptr()) && !PyTuple_CheckExact(object.ptr()))
      result->object = py::type::of(object); // a structseq: torch.return_types
    return result;
  }
  unsupported("a torch call returned a " + typeName(object));
}

VariablePtr Evaluator::torchCall(
    py::handle function, const std::vector<VariablePtr> &args,
    const std::vector<std::pair<std::string, VariablePtr>> &kwargs) {
  py::list traceArgs;
  for (const VariablePtr &arg : args)
    traceArgs.append(toTraceObject(arg));
  py::dict traceKwargs;
  for (const auto &[name, value] : kwargs)
    traceKwargs[py::str(name)] = toTraceObject(value);
  py::tuple traced;
  try {
    traced =
        Handles::get().traceCall(function, py::tuple(traceArgs), traceKwargs);
  } catch (py::error_already_set &error) {
    std::string message = error.what();
    unsupported("calling " + py::repr(function).cast<std::string>() +
                " on meta tensors failed (" +
                message.substr(0, message.find('\n')) +
                "): data-dependent or unsupported torch call");
  }
  for (py::handle call : py::list(traced[1])) {
    py::tuple record = py::reinterpret_borrow<py::tuple>(call);
    py::handle op = record[0];
    auto tensorValue = [&](py::handle tensor) -> Value * {
      auto it = valueOfMeta_.find(tensor.ptr());
      if (it == valueOfMeta_.end())
        unsupported("a torch call used a tensor created outside the "
                    "dispatcher (" +
                    py::repr(op).cast<std::string>() + ")");
      return it->second;
    };
    std::vector<Argument> positional;
    for (py::handle arg : record[1])
      positional.push_back(python::argumentFromPython(arg, tensorValue));
    std::vector<std::pair<std::string, Argument>> keywords;
    for (auto entry : py::reinterpret_borrow<py::dict>(record[2]))
      keywords.emplace_back(
          entry.first.cast<std::string>(),
          python::argumentFromPython(entry.second, tensorValue));
    // Torch's metadata, on the device the program runs on: that of the
    // tensor arguments (a 0-d CPU tensor mixes with any device), or the
    // factory's device argument.
    std::optional<Device> device;
    auto consider = [&](const Argument &argument) {
      if (!argument.isTensor())
        return;
      const TensorMeta &meta = argument.toTensor()->meta();
      bool cpuScalar = meta.dim() == 0 && meta.device.type == DeviceType::CPU;
      if (!device || !cpuScalar)
        device = meta.device;
    };
    for (const Argument &argument : positional)
      consider(argument);
    for (const auto &[name, argument] : keywords) {
      if (name == "device" && argument.kind() == Argument::Kind::Device)
        device = argument.toDevice();
      else
        consider(argument);
    }
    // One entry per flat result; a result the op leaves out is None.
    std::vector<py::object> resultTensors;
    python::TorchResults results;
    std::function<void(py::handle)> collect = [&](py::handle out) {
      if (python::isTensor(out)) {
        TensorMeta meta = python::tensorMetaOf(out);
        meta.device = device.value_or(Device());
        results.add(meta);
        resultTensors.push_back(py::reinterpret_borrow<py::object>(out));
      } else if (out.is_none()) {
        results.add(std::nullopt);
        resultTensors.emplace_back();
      } else if (PyTuple_Check(out.ptr()) || PyList_Check(out.ptr())) {
        for (py::handle item : out)
          collect(item);
      }
    };
    collect(record[3]);
    Node *node = python::appendAtenCall(*graph_, op, positional, keywords,
                                        results, where_, notes_);
    node->setOrigin(where_);
    std::vector<Value *> values = python::flatResults(*node, results);
    if (values.size() != resultTensors.size())
      unsupported(py::repr(op).cast<std::string>() +
                  ": results do not match torch's");
    for (size_t i = 0; i < resultTensors.size(); ++i) {
      if (!values[i] || !resultTensors[i])
        continue;
      metaTensors_[values[i]] = resultTensors[i];
      valueOfMeta_[resultTensors[i].ptr()] = values[i];
      keepAlive_.push_back(resultTensors[i]);
    }
  }
  return fromTraceObject(traced[0]);
}

void Evaluator::setGradMode(bool enabled) {
  if (enabled == gradEnabled_)
    return;
  gradEnabled_ = enabled;
  graph_->addOp("kiln::set_grad_enabled", {Argument(enabled)})
      ->setOrigin(where_);
}

// ---------------------------------------------------------------------------
// Attributes.

VariablePtr Evaluator::loadAttr(const VariablePtr &base,
                                const std::string &name) {
  const Handles &h = Handles::get();
  auto attrSource = [&]() -> SourcePtr {
    return base->source ? Source::attr(base->source, name) : nullptr;
  };
  switch (base->kind) {
  case Kind::Tensor: {
    const TensorMeta &meta = base->tensor->meta();
    if (name == "shape")
      return Variable::constant(h.sizeType(py::cast(meta.sizes)));
    if (name == "dtype")
      return Variable::constant(python::dtypeToTorch(meta.dtype));
    if (name == "device")
      return Variable::constant(python::deviceToTorch(meta.device));
    if (name == "ndim")
      return Variable::constant(py::int_(meta.dim()));
    if (name == "is_cuda")
      return Variable::constant(
          py::bool_(meta.device.type == DeviceType::CUDA));
    if (name == "is_cpu")
      return Variable::constant(py::bool_(meta.device.type == DeviceType::CPU));
    if (name == "requires_grad" || name == "grad" || name == "data" ||
        name == "grad_fn" || name == "_version")
      unsupported("reading tensor." + name);
    py::object attribute = py::getattr(h.tensorType, name.c_str(), py::none());
    if (attribute.is_none())
      unsupported("tensor has no attribute '" + name + "'");
    std::string kind = typeName(attribute);
    if (kind == "getset_descriptor" || kind == "property") {
      // x.T, x.mT, x.real: an attribute read that runs torch ops.
      py::object getter = h.operatorModule.attr("attrgetter")(name);
      return torchCall(getter, {base}, {});
    }
    auto method = Variable::make(Kind::Method);
    method->name = name;
    method->items.push_back(base);
    return method;
  }
  case Kind::Module:
  case Kind::Object: {
    py::object object = base->object;
    py::object attribute;
    try {
      attribute = object.attr(name.c_str());
    } catch (py::error_already_set &) {
      unsupported(typeName(object) + " has no attribute '" + name + "'");
    }
    if (py::isinstance(attribute, h.methodType) &&
        py::object(attribute.attr("__self__")).is(object)) {
      auto method = Variable::make(Kind::Method);
      method->object = attribute.attr("__func__");
      method->items.push_back(base);
      return method;
    }
    if (VariablePtr read = dictReadMethod(base, name, attribute))
      return read;
    return wrap(attribute, attrSource());
  }
  case Kind::PythonModule: {
    py::object attribute;
    try {
      attribute = base->object.attr(name.c_str());
    } catch (py::error_already_set &) {
      unsupported("module " + moduleOf(base->object) + " has no attribute '" +
                  name + "'");
    }
    // torch, math and the like are not monkey-patched in practice: their
    // attributes are taken as constants, which keeps guards cheap.
    std::string moduleName = base->object.attr("__name__").cast<std::string>();
    return wrap(attribute,
                isTorchModuleName(moduleName) ? nullptr : attrSource());
  }
  case Kind::Constant:
  case Kind::Callable:
  case Kind::Function: {
    py::object attribute;
    try {
      attribute = base->object.attr(name.c_str());
    } catch (py::error_already_set &) {
      unsupported(typeName(base->object) + " has no attribute '" + name + "'");
    }
    if (isConstantObject(attribute))
      return Variable::constant(attribute);
    if (base->kind == Kind::Constant && PyCallable_Check(attribute.ptr())) {
      auto callable = Variable::make(Kind::Callable);
      callable->object = attribute; // a method of an immutable constant
      callable->flag = true;        // pure
      return callable;
    }
    return wrap(attribute, attrSource());
  }
  case Kind::Tuple:
    if (base->object && !base->object.is_none()) {
      // A structseq (torch.return_types.max): fields by name.
      py::list placeholders;
      for (size_t i = 0; i < base->items.size(); ++i)
        placeholders.append(py::int_(i));
      py::object probe = base->object(py::tuple(placeholders));
      py::object index = py::getattr(probe, name.c_str(), py::none());
      if (PyLong_Check(index.ptr()))
        return base->items.at(index.cast<size_t>());
    }
    [[fallthrough]];
  case Kind::List:
  case Kind::Dict: {
    auto method = Variable::make(Kind::Method);
    method->name = name;
    method->items.push_back(base);
    return method;
  }
  case Kind::Super: {
    py::object superObject =
        h.builtin("super")(base->object, base->items[0]->object);
    py::object attribute = superObject.attr(name.c_str());
    if (py::isinstance(attribute, h.methodType)) {
      auto method = Variable::make(Kind::Method);
      method->object = attribute.attr("__func__");
      method->items.push_back(base->items[0]);
      return method;
    }
    if (VariablePtr read = dictReadMethod(base->items[0], name, attribute))
      return read;
    return wrap(attribute, nullptr);
  }
  default:
    unsupported("attribute '" + name + "' of a " +
                kindNameOf(pythonTypeOf(base)));
  }
}

// ---------------------------------------------------------------------------
// Calls.

// dict's own read methods on a guarded object that is a dict (a registry
// subclassing dict): read at capture time and guarded by the dict's keys and
// the values read.
VariablePtr Evaluator::dictReadMethod(const VariablePtr &self,
                                      const std::string &name,
                                      py::handle attribute) {
  static const char *kReads[] = {"get",  "__getitem__", "__contains__",
                                 "keys", "values",      "items"};
  if (!self->source || !self->object || !PyDict_Check(self->object.ptr()) ||
      !PyCFunction_Check(attribute.ptr()))
    return nullptr;
  if (std::none_of(std::begin(kReads), std::end(kReads),
                   [&](const char *read) { return name == read; }))
    return nullptr;
  auto method = Variable::make(Kind::Method);
  method->name = name;
  method->items.push_back(self);
  return method;
}

VariablePtr Evaluator::readGuardedDict(const VariablePtr &self,
                                       const std::string &name,
                                       std::vector<VariablePtr> &args) {
  py::handle dict = self->object;
  // Item sources read through __getitem__: it must be dict's own.
  py::object getitem = py::type::of(dict).attr("__getitem__");
  if (!getitem.is(py::type::of(py::dict()).attr("__getitem__")))
    unsupported(typeName(dict) + " overrides __getitem__");
  GuardCheck keys{GuardCheck::Kind::DictKeys, {}, {}};
  py::list keyList;
  Py_ssize_t position = 0;
  PyObject *entryKey, *entryValue;
  while (PyDict_Next(dict.ptr(), &position, &entryKey, &entryValue)) {
    if (!isConstantObject(entryKey))
      unsupported("a dict with non-constant keys");
    keyList.append(py::handle(entryKey));
  }
  keys.expected = py::tuple(keyList);
  guards_.addCheck(self->source, keys);
  auto read = [&](py::handle key) {
    return wrap(
        PyDict_GetItem(dict.ptr(), key.ptr()),
        Source::item(self->source, py::reinterpret_borrow<py::object>(key)));
  };
  if (name == "keys" || name == "values" || name == "items") {
    std::vector<VariablePtr> items;
    for (py::handle key : keyList) {
      if (name == "keys")
        items.push_back(
            Variable::constant(py::reinterpret_borrow<py::object>(key)));
      else if (name == "values")
        items.push_back(read(key));
      else
        items.push_back(Variable::sequence(
            Kind::Tuple,
            {Variable::constant(py::reinterpret_borrow<py::object>(key)),
             read(key)}));
    }
    return Variable::sequence(Kind::List, std::move(items));
  }
  if (args.empty())
    unsupported("dict." + name + " without a key");
  std::optional<py::object> key = asConstant(args[0]);
  if (!key)
    unsupported("a dict key that is not a constant");
  bool present = PyDict_Contains(dict.ptr(), key->ptr()) == 1;
  if (name == "__contains__")
    return Variable::constant(py::bool_(present));
  if (present)
    return read(*key);
  if (name == "get")
    return args.size() > 1 ? args[1] : Variable::constant(py::none());
  unsupported("KeyError " + py::repr(*key).cast<std::string>());
}

VariablePtr Evaluator::callMethodOfContainer(const VariablePtr &self,
                                             const std::string &name,
                                             std::vector<VariablePtr> &args) {
  auto none = Variable::constant(py::none());
  if (self->kind == Kind::List) {
    if (name == "append" && args.size() == 1) {
      checkNotInput(self, "appending to");
      self->items.push_back(args[0]);
      return none;
    }
    if (name == "extend" && args.size() == 1) {
      checkNotInput(self, "extending");
      for (const VariablePtr &item : unpack(args[0]))
        self->items.push_back(item);
      return none;
    }
    if (name == "insert" && args.size() == 2) {
      checkNotInput(self, "inserting into");
      int64_t index = asConstant(args[0]).value().cast<int64_t>();
      int64_t size = static_cast<int64_t>(self->items.size());
      index = index < 0 ? std::max<int64_t>(0, index + size)
                        : std::min(index, size);
      self->items.insert(self->items.begin() + index, args[1]);
      return none;
    }
    if (name == "pop" && args.size() <= 1) {
      checkNotInput(self, "popping from");
      if (self->items.empty())
        unsupported("pop from an empty list");
      int64_t size = static_cast<int64_t>(self->items.size());
      int64_t index =
          args.empty() ? size - 1 : asConstant(args[0]).value().cast<int64_t>();
      if (index < 0)
        index += size;
      if (index < 0 || index >= size)
        unsupported("pop index out of range");
      VariablePtr item = self->items[index];
      self->items.erase(self->items.begin() + index);
      return item;
    }
    if (name == "copy" && args.empty())
      return Variable::sequence(Kind::List, self->items);
  }
  if (self->kind == Kind::Dict) {
    auto findKey = [&](const py::object &key) -> int {
      for (size_t i = 0; i < self->keys.size(); ++i)
        if (self->keys[i].equal(key))
          return static_cast<int>(i);
      return -1;
    };
    if (name == "keys" || name == "values" || name == "items") {
      std::vector<VariablePtr> items;
      for (size_t i = 0; i < self->keys.size(); ++i) {
        if (name == "keys")
          items.push_back(Variable::constant(self->keys[i]));
        else if (name == "values")
          items.push_back(self->items[i]);
        else
          items.push_back(Variable::sequence(
              Kind::Tuple,
              {Variable::constant(self->keys[i]), self->items[i]}));
      }
      return Variable::sequence(Kind::List, std::move(items));
    }
    if (name == "get" && (args.size() == 1 || args.size() == 2)) {
      std::optional<py::object> key = asConstant(args[0]);
      if (!key)
        unsupported("a dict key that is not a constant");
      int index = findKey(*key);
      if (index >= 0)
        return self->items[index];
      return args.size() == 2 ? args[1] : none;
    }
    if ((name == "pop" && (args.size() == 1 || args.size() == 2)) ||
        (name == "setdefault" && (args.size() == 1 || args.size() == 2))) {
      std::optional<py::object> key = asConstant(args[0]);
      if (!key)
        unsupported("a dict key that is not a constant");
      int index = findKey(*key);
      VariablePtr fallback = args.size() == 2 ? args[1] : none;
      if (name == "setdefault") {
        if (index >= 0)
          return self->items[index];
        checkNotInput(self, "inserting into");
        self->keys.push_back(*key);
        self->items.push_back(fallback);
        return fallback;
      }
      if (index < 0) {
        if (args.size() == 2)
          return fallback;
        unsupported("KeyError " + py::repr(*key).cast<std::string>());
      }
      checkNotInput(self, "popping from");
      VariablePtr item = self->items[index];
      self->items.erase(self->items.begin() + index);
      self->keys.erase(self->keys.begin() + index);
      return item;
    }
    if (name == "copy" && args.empty()) {
      auto copy = Variable::make(Kind::Dict);
      copy->keys = self->keys;
      copy->items = self->items;
      return copy;
    }
    if (name == "update" && args.size() == 1 && args[0]->is(Kind::Dict)) {
      checkNotInput(self, "updating");
      for (size_t i = 0; i < args[0]->keys.size(); ++i) {
        int index = findKey(args[0]->keys[i]);
        if (index >= 0) {
          self->items[index] = args[0]->items[i];
        } else {
          self->keys.push_back(args[0]->keys[i]);
          self->items.push_back(args[0]->items[i]);
        }
      }
      return none;
    }
    if (name == "__contains__" && args.size() == 1)
      return Variable::constant(
          py::bool_(findKey(asConstant(args[0]).value()) >= 0));
  }
  if (self->kind == Kind::Tuple || self->kind == Kind::List) {
    if ((name == "index" || name == "count") && args.size() == 1) {
      std::optional<py::object> all = asConstant(self);
      std::optional<py::object> item = asConstant(args[0]);
      if (all && item)
        return Variable::constant(all->attr(name.c_str())(*item));
    }
  }
  unsupported("method " + name + " of a " + kindNameOf(pythonTypeOf(self)));
}

VariablePtr Evaluator::callTensorMethod(
    const VariablePtr &self, const std::string &name,
    std::vector<VariablePtr> &args,
    std::vector<std::pair<std::string, VariablePtr>> &kwargs) {
  const TensorMeta &meta = self->tensor->meta();
  auto dimArgument = [&]() -> std::optional<int64_t> {
    if (args.empty() && kwargs.empty())
      return std::nullopt;
    VariablePtr dim = args.empty() ? kwargs[0].second : args[0];
    std::optional<py::object> value = asConstant(dim);
    if (!value || !PyLong_Check(value->ptr()))
      unsupported("tensor." + name + " with a non-constant dim");
    int64_t d = value->cast<int64_t>();
    if (d < -meta.dim() || d >= meta.dim())
      unsupported("tensor." + name + " dim out of range");
    return d < 0 ? d + meta.dim() : d;
  };
  if (name == "size") {
    std::optional<int64_t> dim = dimArgument();
    if (dim)
      return Variable::constant(py::int_(meta.sizes[*dim]));
    return Variable::constant(Handles::get().sizeType(py::cast(meta.sizes)));
  }
  if (name == "stride") {
    std::optional<int64_t> dim = dimArgument();
    if (dim)
      return Variable::constant(py::int_(meta.strides[*dim]));
    return Variable::constant(py::tuple(py::cast(meta.strides)));
  }
  if ((name == "dim" || name == "ndimension") && args.empty())
    return Variable::constant(py::int_(meta.dim()));
  if ((name == "numel" || name == "nelement") && args.empty())
    return Variable::constant(py::int_(meta.numel()));
  if (name == "element_size" && args.empty())
    return Variable::constant(py::int_(itemSize(meta.dtype)));
  if (name == "is_floating_point" && args.empty())
    return Variable::constant(py::bool_(isFloatingPoint(meta.dtype)));
  if (name == "is_complex" && args.empty())
    return Variable::constant(py::bool_(isComplex(meta.dtype)));
  if (name == "is_contiguous" && args.empty() && kwargs.empty())
    return Variable::constant(py::bool_(meta.isContiguous()));
  if (name == "get_device" && args.empty())
    return Variable::constant(py::int_(meta.device.type == DeviceType::CUDA
                                           ? std::max(meta.device.index, 0)
                                           : -1));
  if (name == "item" || name == "tolist" || name == "numpy" ||
      name == "__bool__" || name == "data_ptr" || name == "backward" ||
      name == "register_hook" || name == "retain_grad" || name == "cpu" ||
      name == "cuda")
    unsupported("tensor." + name + "()");
  std::vector<VariablePtr> allArgs{self};
  allArgs.insert(allArgs.end(), args.begin(), args.end());
  py::object method = Handles::get().tensorType.attr(name.c_str());
  return torchCall(method, allArgs, kwargs);
}

VariablePtr
Evaluator::callBuiltin(py::handle function, std::vector<VariablePtr> &args,
                       std::vector<std::pair<std::string, VariablePtr>> &kwargs,
                       bool &handled) {
  const Handles &h = Handles::get();
  handled = true;
  auto is = [&](const char *name) { return function.is(h.builtin(name)); };
  if (is("len") && args.size() == 1) {
    const VariablePtr &value = args[0];
    switch (value->kind) {
    case Kind::Tuple:
    case Kind::List:
    case Kind::Dict:
      return Variable::constant(py::int_(value->items.size()));
    case Kind::Tensor:
      if (value->tensor->meta().dim() == 0)
        unsupported("len() of a 0-d tensor");
      return Variable::constant(py::int_(value->tensor->meta().sizes[0]));
    case Kind::Module: {
      if (value->source) {
        GuardCheck length{GuardCheck::Kind::Length, {}, {}};
        length.length = py::len(value->object);
        guards_.addCheck(value->source, length);
      }
      return Variable::constant(py::int_(py::len(value->object)));
    }
    default:
      break;
    }
  }
  if ((is("isinstance") || is("issubclass")) && args.size() == 2) {
    std::optional<py::object> classes = asConstant(args[1]);
    if (!classes) {
      if (args[1]->kind == Kind::Callable)
        classes = args[1]->object;
      else
        unsupported("isinstance with a non-constant class");
    }
    if (is("isinstance")) {
      py::object type = pythonTypeOf(args[0]);
      if (args[0]->kind == Kind::Tensor) {
        // Parameters are guarded by exact type, so the input's type is known.
        return Variable::constant(
            py::bool_(PyObject_IsSubclass(type.ptr(), classes->ptr()) == 1));
      }
      std::optional<py::object> object = asConstant(args[0]);
      if (!object && (args[0]->kind == Kind::Object))
        object = args[0]->object;
      if (object)
        return Variable::constant(
            py::bool_(PyObject_IsInstance(object->ptr(), classes->ptr()) == 1));
      return Variable::constant(
          py::bool_(PyObject_IsSubclass(type.ptr(), classes->ptr()) == 1));
    }
  }
  if (is("range") || is("enumerate") || is("zip") || is("reversed") ||
      is("sorted") || is("list") || is("tuple") || is("iter")) {
    std::vector<std::optional<py::object>> constants;
    bool allConstant = kwargs.empty();
    for (const VariablePtr &arg : args) {
      constants.push_back(asConstant(arg));
      allConstant &= constants.back().has_value() && arg->kind != Kind::Module;
    }
    if (is("range") && allConstant) {
      py::list values;
      for (auto &constant : constants)
        values.append(*constant);
      return Variable::constant(function(*py::tuple(values)));
    }
    if (is("enumerate") && (args.size() == 1 || args.size() == 2) &&
        kwargs.empty()) {
      int64_t start =
          args.size() == 2 ? asConstant(args[1]).value().cast<int64_t>() : 0;
      auto iterator = Variable::make(Kind::Iterator);
      for (const VariablePtr &item : unpack(args[0]))
        iterator->items.push_back(Variable::sequence(
            Kind::Tuple, {Variable::constant(py::int_(start++)), item}));
      return iterator;
    }
    if (is("zip") && kwargs.empty()) {
      std::vector<std::vector<VariablePtr>> columns;
      size_t length = SIZE_MAX;
      for (const VariablePtr &arg : args) {
        columns.push_back(unpack(arg));
        length = std::min(length, columns.back().size());
      }
      auto iterator = Variable::make(Kind::Iterator);
      for (size_t i = 0; i < (args.empty() ? 0 : length); ++i) {
        std::vector<VariablePtr> row;
        for (auto &column : columns)
          row.push_back(column[i]);
        iterator->items.push_back(
            Variable::sequence(Kind::Tuple, std::move(row)));
      }
      return iterator;
    }
    if (is("reversed") && args.size() == 1) {
      auto iterator = Variable::make(Kind::Iterator);
      std::vector<VariablePtr> items = unpack(args[0]);
      iterator->items.assign(items.rbegin(), items.rend());
      return iterator;
    }
    if ((is("list") || is("tuple")) && args.size() <= 1 && kwargs.empty()) {
      std::vector<VariablePtr> items =
          args.empty() ? std::vector<VariablePtr>() : unpack(args[0]);
      return Variable::sequence(is("list") ? Kind::List : Kind::Tuple,
                                std::move(items));
    }
    if (is("iter") && args.size() == 1)
      return iterate(args[0]);
  }
  if (is("getattr") && (args.size() == 2 || args.size() == 3)) {
    std::optional<py::object> name = asConstant(args[1]);
    if (!name || !PyUnicode_Check(name->ptr()))
      unsupported("getattr with a non-constant name");
    try {
      return loadAttr(args[0], name->cast<std::string>());
    } catch (const Unsupported &) {
      if (args.size() == 3 && args[0]->kind != Kind::Tensor)
        return args[2];
      throw;
    }
  }
  if (is("hasattr") && args.size() == 2 &&
      (args[0]->kind == Kind::Module || args[0]->kind == Kind::Object)) {
    std::optional<py::object> name = asConstant(args[1]);
    bool has =
        py::hasattr(args[0]->object, name.value().cast<std::string>().c_str());
    return Variable::constant(py::bool_(has));
  }
  if (is("super") && args.empty()) {
    unsupported("zero-argument super() outside a method");
  }
  if ((is("sum") || is("max") || is("min") || is("abs")) &&
      std::any_of(args.begin(), args.end(), [](const VariablePtr &arg) {
        return arg->kind != Kind::Constant;
      })) {
    if (is("abs") && args.size() == 1 && args[0]->kind == Kind::Tensor)
      return torchCall(h.builtin("abs"), args, {});
    if (is("sum") && args.size() >= 1 && kwargs.empty()) {
      std::vector<VariablePtr> items = unpack(args[0]);
      VariablePtr total =
          args.size() == 2 ? args[1] : Variable::constant(py::int_(0));
      for (const VariablePtr &item : items) {
        std::optional<py::object> a = asConstant(total), b = asConstant(item);
        total =
            a && b ? Variable::constant(py::reinterpret_steal<py::object>(
                         PyNumber_Add(a->ptr(), b->ptr())))
                   : torchCall(h.operatorModule.attr("add"), {total, item}, {});
      }
      return total;
    }
    if ((is("max") || is("min")) && args.size() == 1 && kwargs.empty()) {
      std::vector<VariablePtr> items = unpack(args[0]);
      py::list values;
      for (const VariablePtr &item : items) {
        std::optional<py::object> constant = asConstant(item);
        if (!constant)
          unsupported("max/min over tensors (data-dependent)");
        values.append(*constant);
      }
      return Variable::constant(function(values));
    }
  }
  handled = false;
  return nullptr;
}

VariablePtr
Evaluator::call(const VariablePtr &callable, std::vector<VariablePtr> args,
                std::vector<std::pair<std::string, VariablePtr>> kwargs) {
  const Handles &h = Handles::get();
  switch (callable->kind) {
  case Kind::Function:
    if (callable->object && isTorchModuleName(moduleOf(callable->object)))
      return torchCall(callable->object, args, kwargs);
    return inlineFunction(callable, std::move(args), std::move(kwargs));
  case Kind::Module:
    return inlineModule(callable, std::move(args), std::move(kwargs));
  case Kind::Method: {
    const VariablePtr &self = callable->items.at(0);
    if (!callable->object || callable->object.is_none()) {
      if (self->kind == Kind::Tensor)
        return callTensorMethod(self, callable->name, args, kwargs);
      if (self->kind == Kind::Object && kwargs.empty())
        return readGuardedDict(self, callable->name, args);
      if (!kwargs.empty())
        unsupported("keyword arguments to a container method");
      return callMethodOfContainer(self, callable->name, args);
    }
    args.insert(args.begin(), self);
    auto function = Variable::make(Kind::Function);
    function->object = callable->object;
    if (isTorchModuleName(moduleOf(callable->object))) {
      // A method that nn.Module itself defines (e.g. a torch module's
      // helper): inline it like user code.
    }
    return inlineFunction(function, std::move(args), std::move(kwargs));
  }
  case Kind::GradRestore:
    setGradMode(callable->flag);
    return Variable::constant(py::none());
  case Kind::Callable:
  case Kind::Constant: {
    py::object function = callable->object;
    for (const py::object &falseFunction : h.alwaysFalse)
      if (function.is(falseFunction))
        return Variable::constant(py::bool_(false));
    if (function.is(h.isGradEnabled))
      return Variable::constant(py::bool_(gradEnabled_));
    if (function.is(h.noGrad) || function.is(h.enableGrad)) {
      if (!args.empty() || !kwargs.empty())
        unsupported("torch.no_grad/enable_grad with arguments");
      auto context = Variable::make(Kind::GradContext);
      context->flag = function.is(h.enableGrad);
      return context;
    }
    if (function.is(h.tensorFromData) || function.is(h.asTensor)) {
      // torch.tensor(data): data is Python constants, so the tensor is a
      // graph constant (it never goes through the dispatcher).
      py::list constantArgs;
      py::dict constantKwargs;
      for (const VariablePtr &arg : args) {
        std::optional<py::object> constant = asConstant(arg);
        if (!constant || arg->kind == Kind::Module)
          unsupported("torch.tensor of data that is not made of constants");
        constantArgs.append(*constant);
      }
      for (const auto &[name, value] : kwargs) {
        std::optional<py::object> constant = asConstant(value);
        if (!constant)
          unsupported("torch.tensor with a non-constant " + name);
        constantKwargs[py::str(name)] = *constant;
      }
      py::object tensor = function(*py::tuple(constantArgs), **constantKwargs);
      Value *value = graph_->addConstant(python::constantDataOf(tensor));
      return Variable::ofTensor(value);
    }
    if (function.is(h.builtin("print")))
      unsupported("print() (a side effect)");
    if (function.is(h.builtin("super")) && args.empty())
      unsupported("super() needs the enclosing method");
    bool handled = false;
    if (PyObject_Hash(function.ptr()) != -1 &&
        h.pureBuiltins.count(function.ptr())) {
      VariablePtr result = callBuiltin(function, args, kwargs, handled);
      if (handled)
        return result;
    } else {
      PyErr_Clear();
    }
    // Pure functions with constant arguments: evaluate now.
    std::string module = moduleOf(function);
    bool pure = callable->flag || h.pureBuiltins.count(function.ptr()) ||
                module == "math" || module == "operator" ||
                module == "_operator";
    if (pure) {
      py::list constantArgs;
      py::dict constantKwargs;
      bool allConstant = true;
      for (const VariablePtr &arg : args) {
        std::optional<py::object> constant = asConstant(arg);
        if (!constant || arg->kind == Kind::Module) {
          allConstant = false;
          break;
        }
        constantArgs.append(*constant);
      }
      for (const auto &[name, value] : kwargs) {
        std::optional<py::object> constant = asConstant(value);
        if (!constant) {
          allConstant = false;
          break;
        }
        constantKwargs[py::str(name)] = *constant;
      }
      if (allConstant) {
        py::object result;
        try {
          result = function(*py::tuple(constantArgs), **constantKwargs);
        } catch (py::error_already_set &error) {
          unsupported(std::string("a call that raises during capture: ") +
                      error.what());
        }
        if (isConstantObject(result))
          return Variable::constant(result);
        if (PyList_CheckExact(result.ptr()) ||
            PyTuple_CheckExact(result.ptr()) || PyDict_CheckExact(result.ptr()))
          return wrap(result, nullptr);
        unsupported("a call returning a " + typeName(result));
      }
    }
    if (py::isinstance(function, py::type::of(py::type::of(py::none()))) &&
        function.is(h.sizeType)) {
      std::optional<py::object> value =
          args.size() == 1 ? asConstant(args[0]) : std::nullopt;
      if (value)
        return Variable::constant(function(*value));
    }
    if (isTorchModuleName(module) && !module.empty() && module != "builtins" &&
        !PyType_Check(function.ptr()))
      return torchCall(function, args, kwargs);
    if (module == "_operator" || module == "operator" ||
        function.is(h.builtin("abs")))
      return torchCall(function, args, kwargs);
    unsupported("a call to " + py::repr(function).cast<std::string>());
  }
  default:
    unsupported("calling a " + kindNameOf(pythonTypeOf(callable)));
  }
}

VariablePtr Evaluator::inlineModule(
    const VariablePtr &module, std::vector<VariablePtr> args,
    std::vector<std::pair<std::string, VariablePtr>> kwargs) {
  const Handles &h = Handles::get();
  py::object object = module->object;
  py::object type = py::type::of(object);
  if (!py::object(type.attr("__call__")).is(h.moduleCall))
    unsupported(typeName(object) + " overrides __call__");
  for (const char *hooks : {"_forward_hooks", "_forward_pre_hooks",
                            "_backward_hooks", "_backward_pre_hooks"})
    if (py::len(object.attr(hooks)) != 0)
      unsupported("a module with hooks (" + typeName(object) + "." + hooks +
                  ")");
  for (const char *hooks :
       {"_global_forward_hooks", "_global_forward_pre_hooks",
        "_global_backward_hooks", "_global_backward_pre_hooks"})
    if (py::hasattr(h.nnModules, hooks) &&
        py::len(h.nnModules.attr(hooks)) != 0)
      unsupported("global module hooks are registered");
  auto forward = Variable::make(Kind::Function);
  forward->object = type.attr("forward");
  if (!py::isinstance(forward->object, h.functionType))
    unsupported(typeName(object) + ".forward is not a Python function");
  args.insert(args.begin(), module);
  return inlineFunction(forward, std::move(args), std::move(kwargs));
}

VariablePtr Evaluator::inlineFunction(
    const VariablePtr &function, std::vector<VariablePtr> args,
    std::vector<std::pair<std::string, VariablePtr>> kwargs) {
  if (depth_ >= kMaxInlineDepth)
    unsupported("calls nested deeper than " + std::to_string(kMaxInlineDepth));
  py::object code;
  py::object globals;
  py::object defaults = py::none();
  py::object kwdefaults = py::none();
  std::vector<VariablePtr> defaultVariables;
  Frame frame;
  if (function->object) {
    py::object fn = function->object;
    code = fn.attr("__code__");
    globals = fn.attr("__globals__");
    defaults = fn.attr("__defaults__");
    kwdefaults = fn.attr("__kwdefaults__");
    SourcePtr fnSource = Source::fixed(
        fn, "F[" + std::to_string(reinterpret_cast<uintptr_t>(fn.ptr())) + "]");
    if (!defaults.is_none()) {
      int i = 0;
      for (py::handle item : defaults)
        defaultVariables.push_back(
            wrap(item, Source::item(Source::attr(fnSource, "__defaults__"),
                                    py::int_(i++))));
    }
    py::object closure = fn.attr("__closure__");
    if (!closure.is_none()) {
      for (py::handle cell : closure) {
        auto cellVariable = Variable::make(Kind::Cell);
        cellVariable->object = py::reinterpret_borrow<py::object>(cell);
        cellVariable->source = Source::attr(
            Source::fixed(
                cellVariable->object,
                "Cell[" +
                    std::to_string(reinterpret_cast<uintptr_t>(cell.ptr())) +
                    "]"),
            "cell_contents");
        frame.freeCells.push_back(cellVariable);
      }
    }
  } else {
    code = function->code;
    globals = function->globals;
    kwdefaults = function->kwdefaults;
    defaultVariables = function->items;
    frame.freeCells = function->cells;
  }
  setUpFrame(frame, code, globals);
  auto *codeObject = reinterpret_cast<PyCodeObject *>(code.ptr());

  // Bind arguments as CPython does.
  int argcount = codeObject->co_argcount;
  int kwonly = codeObject->co_kwonlyargcount;
  int posonly = codeObject->co_posonlyargcount;
  bool hasVarargs = codeObject->co_flags & CO_VARARGS;
  bool hasVarkw = codeObject->co_flags & CO_VARKEYWORDS;
  std::vector<VariablePtr> extra;
  for (size_t i = 0; i < args.size(); ++i) {
    if (static_cast<int>(i) < argcount)
      frame.locals[i] = args[i];
    else if (hasVarargs)
      extra.push_back(args[i]);
    else
      unsupported(frame.code->name + "() takes " + std::to_string(argcount) +
                  " positional arguments but " + std::to_string(args.size()) +
                  " were given");
  }
  auto varkw = Variable::make(Kind::Dict);
  for (auto &[name, value] : kwargs) {
    int index = -1;
    for (int i = posonly; i < argcount + kwonly; ++i)
      if (frame.localNames[i] == name)
        index = i;
    if (index >= 0) {
      if (frame.locals[index])
        unsupported(frame.code->name + "() got multiple values for argument '" +
                    name + "'");
      frame.locals[index] = value;
    } else if (hasVarkw) {
      varkw->keys.push_back(py::str(name));
      varkw->items.push_back(value);
    } else {
      unsupported(frame.code->name + "() got an unexpected keyword argument '" +
                  name + "'");
    }
  }
  int firstDefault = argcount - static_cast<int>(defaultVariables.size());
  for (int i = 0; i < argcount; ++i) {
    if (frame.locals[i])
      continue;
    if (i >= firstDefault)
      frame.locals[i] = defaultVariables[i - firstDefault];
    else
      unsupported(frame.code->name + "() missing required argument '" +
                  frame.localNames[i] + "'");
  }
  for (int i = argcount; i < argcount + kwonly; ++i) {
    if (frame.locals[i])
      continue;
    py::object name = py::str(frame.localNames[i]);
    if (!kwdefaults.is_none() && kwdefaults.contains(name))
      frame.locals[i] = wrap(kwdefaults[name], nullptr);
    else
      unsupported(frame.code->name + "() missing keyword-only argument '" +
                  frame.localNames[i] + "'");
  }
  int next = argcount + kwonly;
  if (hasVarargs)
    frame.locals[next++] = Variable::sequence(Kind::Tuple, std::move(extra));
  if (hasVarkw)
    frame.locals[next++] = varkw;

  ++depth_;
  VariablePtr result;
  try {
    result = runFrame(frame);
  } catch (...) {
    --depth_;
    throw;
  }
  --depth_;
  if (frame.code->isGenerator) {
    // Generators made and consumed inside captured code (generator
    // expressions, helper generators) run to exhaustion when called; their
    // values only feed graph ops, so laziness changes nothing observable.
    auto iterator = Variable::make(Kind::Iterator);
    iterator->items = std::move(frame.yielded);
    return iterator;
  }
  return result;
}

// ---------------------------------------------------------------------------
// The interpreter loop.

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

VariablePtr Evaluator::loadGlobal(Frame &frame, const std::string &name) {
  py::str key(name);
  bool rootGlobals = frame.globals.ptr() == inputs_.globals;
  if (PyDict_Contains(frame.globals.ptr(), key.ptr()) == 1) {
    SourcePtr source =
        rootGlobals ? Source::global(name)
                    : Source::item(Source::fixed(frame.globals,
                                                 globalsName(frame.globals)),
                                   key);
    return wrap(frame.globals[key], source);
  }
  if (PyDict_Contains(frame.builtins.ptr(), key.ptr()) == 1) {
    SourcePtr source = rootGlobals ? Source::builtin(name) : nullptr;
    return wrap(frame.builtins[key], source);
  }
  unsupported("name '" + name + "' is not defined");
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

void Evaluator::binaryOp(Frame &frame, int op) {
  // CPython's NB_* numbering; the in-place forms follow at op + 13.
  static const char *kOperators[] = {
      "add", "and_", "floordiv", "lshift", "matmul",  "mul", "mod",
      "or_", "pow",  "rshift",   "sub",    "truediv", "xor_"};
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
  std::optional<py::object> a = asConstant(left), b = asConstant(right);
  bool tensorInvolved = left->is(Kind::Tensor) || right->is(Kind::Tensor);
  if (!tensorInvolved && a && b && left->kind != Kind::List &&
      left->kind != Kind::Dict && right->kind != Kind::List) {
    py::object function = h.operatorModule.attr(kOperators[base]);
    try {
      frame.stack.push_back(Variable::constant(function(*a, *b)));
    } catch (py::error_already_set &error) {
      unsupported(std::string("an operation that raises during capture: ") +
                  error.what());
    }
    return;
  }
  if (!tensorInvolved) {
    // Sequences: concatenation and repetition build new symbolic sequences.
    if ((left->is(Kind::List) || left->is(Kind::Tuple)) && base == 0 &&
        right->kind == left->kind) {
      if (inplace && left->is(Kind::List)) {
        checkNotInput(left, "extending");
        for (const VariablePtr &item : right->items)
          left->items.push_back(item);
        frame.stack.push_back(left);
        return;
      }
      std::vector<VariablePtr> items = left->items;
      items.insert(items.end(), right->items.begin(), right->items.end());
      frame.stack.push_back(Variable::sequence(left->kind, std::move(items)));
      return;
    }
    if ((left->is(Kind::List) || left->is(Kind::Tuple)) && base == 5 && b &&
        PyLong_Check(b->ptr())) {
      std::vector<VariablePtr> items;
      for (int64_t i = 0; i < b->cast<int64_t>(); ++i)
        items.insert(items.end(), left->items.begin(), left->items.end());
      frame.stack.push_back(Variable::sequence(left->kind, std::move(items)));
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
    const Instruction &instruction = instructions[frame.pc++];
    if (++executed_ > kMaxInstructions)
      unsupported("more than " + std::to_string(kMaxInstructions) +
                  " instructions (a long unrolled loop)");
    where_ = frame.code->filename + ":" + std::to_string(instruction.line);
    try {
      execute(frame, instruction);
    } catch (const Unsupported &error) {
      std::string message = error.what();
      if (message.find(" [at ") == std::string::npos)
        message += " [at " + where_ + " in " + frame.code->name + ", " +
                   instruction.opname + "]";
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
    slot = nullptr;
    return;
  }
  case Opcode::STORE_FAST: {
    VariablePtr value = pop(frame);
    frame.locals.at(instruction.arg) = value->is(Kind::Null) ? nullptr : value;
    return;
  }
  case Opcode::DELETE_FAST:
    frame.locals.at(instruction.arg) = nullptr;
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
  case Opcode::STORE_ATTR:
    unsupported("setting attribute '" + instruction.argval.cast<std::string>() +
                "' (a side effect on an object)");
  case Opcode::STORE_GLOBAL:
    unsupported("assigning global '" + instruction.argval.cast<std::string>() +
                "'");
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
    if (!cell || !cell->is(Kind::Cell) || cell->object)
      unsupported("assigning nonlocal '" + frame.localNames[instruction.arg] +
                  "' of an enclosing function");
    cell->items.assign(1, pop(frame));
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
          v->is(Kind::Dict) || v->is(Kind::Iterator) || v->is(Kind::Method))
        return nullptr;
      return v->object.ptr();
    };
    PyObject *a = objectOf(left), *b = objectOf(right);
    if (a && b)
      same = a == b;
    else if (left == right)
      same = true;
    else if ((a && a == Py_None) || (b && b == Py_None))
      same = false; // a symbolic value is never None
    else
      unsupported("`is` between symbolic values");
    frame.stack.push_back(
        Variable::constant(py::bool_(same != (instruction.arg == 1))));
    return;
  }
  case Opcode::CONTAINS_OP: {
    VariablePtr container = pop(frame);
    VariablePtr item = pop(frame);
    std::optional<py::object> key = asConstant(item);
    bool found = false;
    if (container->is(Kind::Dict) && key) {
      for (const py::object &candidate : container->keys)
        found |= candidate.equal(*key);
    } else if (std::optional<py::object> all = asConstant(container);
               all && key) {
      found = PySequence_Contains(all->ptr(), key->ptr()) == 1;
    } else if (container->is(Kind::Object) && key && container->source &&
               PyDict_Check(container->object.ptr())) {
      std::vector<VariablePtr> keyArgument{item};
      found = truthy(readGuardedDict(container, "__contains__", keyArgument));
    } else if (container->is(Kind::Module) && key) {
      found = PySequence_Contains(container->object.ptr(), key->ptr()) == 1;
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
    VariablePtr container = pop(frame);
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
      int64_t index = constantKey->cast<int64_t>();
      int64_t size = static_cast<int64_t>(container->items.size());
      if (index < 0)
        index += size;
      if (index < 0 || index >= size)
        unsupported("index out of range");
      frame.stack.push_back(container->items[index]);
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
      unsupported("KeyError " + py::repr(*constantKey).cast<std::string>());
    }
    case Kind::Constant:
      if (constantKey) {
        frame.stack.push_back(wrap(container->object[*constantKey], nullptr));
        return;
      }
      break;
    case Kind::Module:
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
    VariablePtr container = pop(frame);
    VariablePtr value = pop(frame);
    if (container->is(Kind::Tensor)) {
      torchCall(h.operatorModule.attr("setitem"), {container, key, value}, {});
      return;
    }
    std::optional<py::object> constantKey = asConstant(key);
    if (!constantKey)
      unsupported("a subscript assignment with a non-constant key");
    if (container->is(Kind::List)) {
      checkNotInput(container, "assigning into");
      int64_t index = constantKey->cast<int64_t>();
      int64_t size = static_cast<int64_t>(container->items.size());
      if (index < 0)
        index += size;
      if (index < 0 || index >= size)
        unsupported("list assignment index out of range");
      container->items[index] = value;
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
  case Opcode::STORE_SLICE: {
    VariablePtr stop = pop(frame);
    VariablePtr start = pop(frame);
    VariablePtr container = pop(frame);
    VariablePtr value = pop(frame);
    auto slice = Variable::constant(py::reinterpret_steal<py::object>(
        PySlice_New(asConstant(start).value().ptr(),
                    asConstant(stop).value().ptr(), nullptr)));
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
      dict->keys.push_back(*key);
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
    py::object object = *constant;
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
    if (!context->is(Kind::GradContext))
      unsupported("a `with` block over a " + kindNameOf(pythonTypeOf(context)));
    auto restore = Variable::make(Kind::GradRestore);
    restore->flag = gradEnabled_;
    setGradMode(context->flag);
    frame.stack.push_back(restore);
    frame.stack.push_back(Variable::constant(py::none()));
    return;
  }
  case Opcode::LOAD_ASSERTION_ERROR:
    frame.stack.push_back(wrap(h.builtin("AssertionError"), nullptr));
    return;
  case Opcode::RAISE_VARARGS:
    unsupported("raising an exception (a failing assert or raise statement)");
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

// ---------------------------------------------------------------------------
// The result.

OutputTemplate Evaluator::buildOutput(const VariablePtr &value,
                                      std::vector<Argument> &outputs) {
  OutputTemplate result;
  switch (value->kind) {
  case Kind::Tensor:
    result.kind = OutputTemplate::Kind::Tensor;
    result.index = static_cast<int>(outputs.size());
    outputs.push_back(value->tensor);
    return result;
  case Kind::Constant:
  case Kind::Module:
  case Kind::Function:
  case Kind::Callable:
  case Kind::PythonModule:
  case Kind::Object:
    if (!value->object)
      break;
    result.kind = OutputTemplate::Kind::Constant;
    result.constant = value->object;
    return result;
  case Kind::Tuple:
  case Kind::List:
  case Kind::Dict:
    result.kind = value->is(Kind::List)   ? OutputTemplate::Kind::List
                  : value->is(Kind::Dict) ? OutputTemplate::Kind::Dict
                  : value->object && !value->object.is_none()
                      ? OutputTemplate::Kind::Struct
                      : OutputTemplate::Kind::Tuple;
    if (result.kind == OutputTemplate::Kind::Struct)
      result.constant = value->object;
    for (const VariablePtr &item : value->items)
      result.items.push_back(buildOutput(item, outputs));
    result.keys = value->keys;
    return result;
  default:
    break;
  }
  unsupported("returning a " + kindNameOf(pythonTypeOf(value)));
}

Capture Evaluator::run(py::handle function) {
  Frame frame;
  frame.isRoot = true;
  py::object code = function.attr("__code__");
  setUpFrame(frame, py::reinterpret_borrow<py::object>(code),
             py::reinterpret_borrow<py::object>(inputs_.globals));
  if (frame.code->isGenerator)
    unsupported("a generator function runs in CPython (its caller consumes it "
                "lazily)");
  auto *codeObject = reinterpret_cast<PyCodeObject *>(code.ptr());
  for (int i = 0; i < inputs_.localCount; ++i)
    frame.rootArguments.push_back(
        py::reinterpret_borrow<py::object>(inputs_.locals[i]));
  if (inputs_.closure) {
    int i = 0;
    for (py::handle cell : py::reinterpret_borrow<py::tuple>(inputs_.closure)) {
      auto cellVariable = Variable::make(Kind::Cell);
      cellVariable->object = py::reinterpret_borrow<py::object>(cell);
      int slot = codeObject->co_nlocalsplus -
                 static_cast<int>(PyTuple_GET_SIZE(inputs_.closure)) + i;
      cellVariable->source = Source::cell(i, frame.localNames.at(slot));
      frame.freeCells.push_back(cellVariable);
      ++i;
    }
  }
  GuardCheck gradMode{GuardCheck::Kind::GradMode, {}, {}};
  gradMode.flag = gradEnabled_;
  guards_.addCheck(nullptr, gradMode);
  bool initialGradMode = gradEnabled_;

  VariablePtr returned = runFrame(frame);
  // Leave grad mode as the caller had it; a `with` block restores it already,
  // so this only matters for unbalanced graphs.
  setGradMode(initialGradMode);

  Capture capture;
  std::vector<Argument> outputs;
  capture.output = buildOutput(returned, outputs);
  graph_->setOutputs(std::move(outputs));
  passes::eliminateDeadCode(*graph_);
  capture.graph = graph_;
  capture.guards = std::move(guards_);
  capture.notes = std::move(notes_);
  return capture;
}

} // namespace

py::object OutputTemplate::build(PyObject *const *outputs) const {
  switch (kind) {
  case Kind::Tensor:
    return py::reinterpret_borrow<py::object>(outputs[index]);
  case Kind::Constant:
    return constant;
  case Kind::Tuple:
  case Kind::Struct: {
    py::tuple items(this->items.size());
    for (size_t i = 0; i < this->items.size(); ++i)
      items[i] = this->items[i].build(outputs);
    if (kind == Kind::Struct)
      return constant(items);
    return items;
  }
  case Kind::List: {
    py::list items;
    for (const OutputTemplate &item : this->items)
      items.append(item.build(outputs));
    return items;
  }
  case Kind::Dict: {
    py::dict items;
    for (size_t i = 0; i < keys.size(); ++i)
      items[keys[i]] = this->items[i].build(outputs);
    return items;
  }
  }
  return py::none();
}

Capture captureFunction(py::handle function, const FrameInputs &inputs) {
  Evaluator evaluator(inputs);
  return evaluator.run(function);
}

} // namespace kiln::frontend
