// The symbolic evaluator: runs bytecode over variable trackers, building a
// graph and guards. Torch calls (functions, tensor methods, operators,
// indexing) are recorded on meta tensors by kiln._trace and appended as the
// ATen ops eager PyTorch runs. This file wraps Python values, records torch
// calls, reads attributes and builds the result; EvaluatorCalls.cpp and
// BytecodeInterpreter.cpp hold the rest of frontend/Evaluator.h's class.
// Depends on frontend/, ir/, bridge/PythonConversion.h, pybind11,
// CPython.
#include "frontend/Evaluator.h"

#include "bridge/PythonConversion.h"

#include <functional>

namespace kiln::frontend::evaluation {

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
      py::isinstance(object, h.torch.attr("layout")) ||
      py::isinstance(object, h.enumType) || py::isinstance(object, h.symInt) ||
      py::isinstance(object, h.symFloat) || py::isinstance(object, h.symBool))
    return true; // an Enum member is an immutable singleton; a SymInt is a
                 // size of this capture
  if (PyTuple_CheckExact(o) || PyFrozenSet_CheckExact(o) ||
      py::isinstance(object, h.sizeType)) {
    for (py::handle item : object)
      if (!isConstantObject(item))
        return false;
    return true;
  }
  return false;
}

// The Python type name of what a variable stands for: "list", "Tensor".
std::string kindNameOf(py::handle type) {
  return py::str(type.attr("__name__")).cast<std::string>();
}

std::string typeName(py::handle object) {
  return Py_TYPE(object.ptr())->tp_name;
}

// The module a callable was defined in ("torch.nn.functional", "math").
py::object structBuilder(py::handle cls) {
  // A namedtuple's constructor takes its fields one by one; _make takes the
  // tuple, as torch.Size and torch.return_types' constructors do.
  if (PyType_Check(cls.ptr()) &&
      PyType_IsSubtype(reinterpret_cast<PyTypeObject *>(cls.ptr()),
                       &PyTuple_Type) &&
      py::hasattr(cls, "_fields") && py::hasattr(cls, "_make"))
    return cls.attr("_make");
  return py::reinterpret_borrow<py::object>(cls);
}

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
  if (symbolic_) {
    // The fake tensor the trace reads; symbolic in the policy's dims.
    std::vector<int64_t> dims = dynamicDims(tensor, source, meta);
    py::object dtype = python::dtypeToTorch(meta.dtype);
    py::object fake =
        dims.empty() ? symbolic_.attr("static")(dtype, meta.sizes, meta.strides,
                                                meta.storageOffset)
                     : symbolic_.attr("input")(dtype, meta.sizes, meta.strides,
                                               meta.storageOffset, dims);
    if (!dims.empty()) {
      py::tuple layout = SymbolTable::module().attr("layout")(fake);
      if (auto symbolic = symbolTable_.layoutOf(layout[3])) {
        value->setSymbolicLayout(std::move(symbolic));
        symbolTable_.bindInputSymbols(*graph_, *value);
      }
    }
    metaTensors_[value] = fake;
    valueOfMeta_[fake.ptr()] = value;
    keepAlive_.push_back(fake);
  }
  guards_.addCheck(source, tensorMatch(tensor, value->meta()));
  guards_.addGraphInput(source);
  inputObjects_[value] = py::reinterpret_borrow<py::object>(tensor);
  VariablePtr variable = Variable::ofTensor(value);
  variable->tensorClass =
      py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject *>(type));
  return variable;
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
    if (isList) // the caller's list, should the frame change it
      result->object = py::reinterpret_borrow<py::object>(object);
  } else if (PySet_CheckExact(object.ptr()) && [&] {
               for (py::handle element : object)
                 if (!isConstantObject(element))
                   return false;
               return true;
             }()) {
    // A set of constants of the caller's: guarded by its contents, modelled
    // on a copy; a change to it is given to the caller's set after the
    // graph (checkNotInput, planSideEffects).
    guard(typeIs(py::type::of(object)));
    guard(equalsConstant(
        py::reinterpret_steal<py::object>(PySet_New(object.ptr()))));
    result = setFromObject(
        py::reinterpret_steal<py::object>(PySet_New(object.ptr())));
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
    result->object = py::reinterpret_borrow<py::object>(object);
  } else if (py::isinstance(object, h.moduleBase)) {
    guard(identity(object));
    result = Variable::make(Kind::Module);
    result->object = py::reinterpret_borrow<py::object>(object);
  } else if (py::isinstance(object, h.functionType) &&
             !h.pureObjectCalls.count(object.ptr())) {
    if (source && isNestedFunction(object)) {
      // Each call of the function that defines it makes it anew (a lambda
      // passed in, a closure a graph break passed on): guarded by its code
      // and globals; inlining reads its defaults and closure through the
      // source.
      guard(typeIs(py::type::of(object)));
      guards_.addCheck(Source::attr(source, "__code__"),
                       identity(object.attr("__code__")));
      guards_.addCheck(Source::attr(source, "__globals__"),
                       identity(object.attr("__globals__")));
    } else {
      guard(identity(object));
    }
    result = Variable::make(Kind::Function);
    result->object = py::reinterpret_borrow<py::object>(object);
  } else if (Py_TYPE(object.ptr()) ==
             reinterpret_cast<PyTypeObject *>(h.partialType.ptr())) {
    // functools.partial: read through its parts (func, args, keywords), so
    // a fresh partial of the same function reuses the capture.
    guard(typeIs(py::type::of(object)));
    result = Variable::make(Kind::Object);
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
  } else if (object.is(h.gradModeExits[0]) || object.is(h.gradModeExits[1])) {
    // A grad-mode block's exit, left open by a graph break before this
    // resume function.
    guard(identity(object));
    result = Variable::make(Kind::GradRestore);
    result->flag = object.is(h.gradModeExits[1]);
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
      return structBuilder(value->object)(py::tuple(items));
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
    // A function defined in the frame has no object yet.
    if (!value->object)
      return std::nullopt;
    return value->object;
  case Kind::Set:
    return realSet(value);
  case Kind::Method: {
    // A method of an identity-guarded module, as a bound method object.
    const VariablePtr &self = value->items.at(0);
    if (!value->object || !PyFunction_Check(value->object.ptr()) ||
        !self->is(Kind::Module) || !self->object)
      return std::nullopt;
    return py::reinterpret_steal<py::object>(
        PyMethod_New(value->object.ptr(), self->object.ptr()));
  }
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
  case Kind::Set:
    return PySet_GET_SIZE(value->object.ptr()) > 0;
  case Kind::Instance: {
    for (const char *method : {"__bool__", "__len__"})
      if (VariablePtr result = callPythonSpecialMethod(value, method, {})) {
        std::optional<py::object> constant = asConstant(result);
        if (!constant)
          unsupported(std::string(method) + " gave a symbolic value");
        return PyObject_IsTrue(constant->ptr()) == 1;
      }
    VariablePtr contents = builtinContents(value, "__len__");
    return contents == value || !contents->items.empty();
  }
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
    PyObject *length = lookUpOnType(type, "__len__");
    if ((PyDict_Check(value->object.ptr()) ||
         PyList_Check(value->object.ptr())) &&
        (value->source || value->ownedByFrame) &&
        !(length && PyFunction_Check(length)) &&
        !py::hasattr(type, "__bool__")) {
      // A builtin container from outside (a module's hook dict): its length
      // is guarded.
      Py_ssize_t size = py::len(value->object);
      if (value->source) {
        GuardCheck check{GuardCheck::Kind::Length, {}, {}};
        check.length = size;
        guards_.addCheck(value->source, check);
      }
      return size > 0;
    }
    for (const char *method : {"__bool__", "__len__"})
      if (py::hasattr(type, method)) {
        VariablePtr result = callPythonSpecialMethod(value, method, {});
        if (!result)
          break;
        std::optional<py::object> constant = asConstant(result);
        if (!constant)
          unsupported(std::string(method) + " gave a symbolic value");
        return PyObject_IsTrue(constant->ptr()) == 1;
      }
    unsupported("truth value of a " + typeName(value->object) + " object");
  }
  default:
    unsupported("truth value of a symbolic " +
                std::to_string(int(value->kind)));
  }
}

static std::vector<VariablePtr> dictViewItems(const VariablePtr &view) {
  const VariablePtr &dict = view->items.at(0);
  std::vector<VariablePtr> items;
  for (size_t i = 0; i < dict->keys.size(); ++i) {
    if (view->name == "keys")
      items.push_back(Variable::constant(dict->keys[i]));
    else if (view->name == "values")
      items.push_back(dict->items[i]);
    else
      items.push_back(Variable::sequence(
          Kind::Tuple, {Variable::constant(dict->keys[i]), dict->items[i]}));
  }
  return items;
}

VariablePtr Evaluator::iterate(const VariablePtr &iterable) {
  auto iterator = Variable::make(Kind::Iterator);
  switch (iterable->kind) {
  case Kind::Iterator:
    return iterable;
  case Kind::DictView:
    iterator->items = dictViewItems(iterable);
    return iterator;
  case Kind::Tuple:
  case Kind::List:
    iterator->items = iterable->items;
    // A list iterator reads the list as it is at each step: the snapshot
    // stands only while the list is unchanged (iteratorIsStale).
    if (iterable->is(Kind::List))
      iterator->cells = {iterable};
    return iterator;
  case Kind::Dict:
    for (const py::object &key : iterable->keys)
      iterator->items.push_back(Variable::constant(key));
    return iterator;
  case Kind::Set:
    for (py::handle element : iterable->object)
      iterator->items.push_back(
          Variable::constant(py::reinterpret_borrow<py::object>(element)));
    return iterator;
  case Kind::Instance: {
    if (VariablePtr result = callPythonSpecialMethod(iterable, "__iter__", {}))
      return iterate(result);
    VariablePtr contents = builtinContents(iterable, "__iter__");
    if (contents != iterable)
      return iterate(contents);
    unsupported("iteration over a " + kindNameOf(iterable->object));
  }
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
    if (iterable->object && PyType_Check(iterable->object.ptr()) &&
        PyObject_IsSubclass(iterable->object.ptr(),
                            Handles::get().enumType.ptr()) == 1) {
      // An Enum class: its members, in definition order (constants; the
      // class is a guarded global or attribute, so are its members).
      for (py::handle member : iterable->object)
        iterator->items.push_back(
            Variable::constant(py::reinterpret_borrow<py::object>(member)));
      return iterator;
    }
    PyErr_Clear();
    unsupported("iteration over a " + kindNameOf(pythonTypeOf(iterable)));
  }
}

bool isNestedFunction(py::handle function) {
  return PyFunction_Check(function.ptr()) &&
         (reinterpret_cast<PyCodeObject *>(PyFunction_GET_CODE(function.ptr()))
              ->co_flags &
          CO_NESTED);
}

bool readThroughSource(const Variable &function) {
  return function.is(Kind::Function) && function.object && function.source &&
         isNestedFunction(function.object);
}

void listsReadBy(const Variable &iterator, std::vector<VariablePtr> &lists) {
  // A list's iterator holds its list; an iterator an enumerate, zip or
  // reversed made holds a spent iterator of each list it reads. An
  // iterator with a recipe among the cells is one that reads this one.
  for (const VariablePtr &cell : iterator.cells) {
    if (cell->is(Kind::List))
      lists.push_back(cell);
    else if (cell->is(Kind::Iterator) && !cell->recipe)
      for (const VariablePtr &list : cell->cells)
        if (list->is(Kind::List))
          lists.push_back(list);
  }
}

bool iteratorIsStale(const Variable &iterator) {
  for (const VariablePtr &cell : iterator.cells) {
    if (cell->is(Kind::List) && cell->items != iterator.items)
      return true;
    // An enumerate or zip took this iterator's items when it was made;
    // Python's takes them as it is advanced. An iterator this one reads
    // (a list's, under an enumerate, zip or reversed) is stale when its
    // list changed.
    if (cell->is(Kind::Iterator) &&
        (cell->position < cell->items.size() || iteratorIsStale(*cell)))
      return true;
  }
  return false;
}

std::vector<VariablePtr> Evaluator::takeRest(const VariablePtr &iterator) {
  if (iteratorIsStale(*iterator))
    unsupported("an iterator over a list changed since, or one that an "
                "unfinished enumerate or zip reads");
  std::vector<VariablePtr> rest(iterator->items.begin() + iterator->position,
                                iterator->items.end());
  iterator->position = iterator->items.size();
  return rest;
}

std::vector<VariablePtr> Evaluator::unpack(const VariablePtr &sequence) {
  // An iterator is consumed, as list(it), sum(it) or a, b = it consume it.
  if (sequence->is(Kind::Iterator))
    return takeRest(sequence);
  VariablePtr iterator = iterate(sequence);
  return std::vector<VariablePtr>(iterator->items.begin() + iterator->position,
                                  iterator->items.end());
}

VariablePtr Evaluator::sequenceOf(const VariablePtr &value) {
  if (value->is(Kind::List) || value->is(Kind::Tuple))
    return value;
  if (value->is(Kind::Constant) && value->object &&
      PyTuple_CheckExact(value->object.ptr())) {
    std::vector<VariablePtr> items;
    for (py::handle item : value->object)
      items.push_back(
          Variable::constant(py::reinterpret_borrow<py::object>(item)));
    return Variable::sequence(Kind::Tuple, std::move(items));
  }
  return nullptr;
}

void Evaluator::setDictItem(const VariablePtr &dict, const py::object &key,
                            const VariablePtr &value) {
  if (int index = findKey(dict, key); index >= 0) {
    dict->items[size_t(index)] = value;
    return;
  }
  dict->keys.push_back(key);
  dict->items.push_back(value);
}

void Evaluator::mergeIntoDict(const VariablePtr &dict,
                              const VariablePtr &other) {
  if (other->is(Kind::Dict)) {
    for (size_t i = 0; i < other->keys.size(); ++i)
      setDictItem(dict, other->keys[i], other->items[i]);
    return;
  }
  // An iterable of (key, value) pairs.
  for (const VariablePtr &pair : unpack(other)) {
    VariablePtr both = sequenceOf(pair);
    if (!both || both->items.size() != 2)
      unsupported("dict.update with items that are not pairs");
    std::optional<py::object> key = asConstant(both->items[0]);
    if (!key)
      unsupported("a dict key that is not a constant");
    setDictItem(dict, *key, both->items[1]);
  }
}

py::object Evaluator::pythonTypeOf(const VariablePtr &value) {
  switch (value->kind) {
  case Kind::Tensor:
    return value->tensorClass ? value->tensorClass : Handles::get().tensorType;
  case Kind::Tuple:
    return value->object && !value->object.is_none()
               ? value->object
               : py::type::of(py::tuple());
  case Kind::List:
    return py::type::of(py::list());
  case Kind::Dict:
    return py::type::of(py::dict());
  case Kind::Instance:
    return value->object;
  case Kind::Set:
    return py::type::of(py::set());
  case Kind::DictView: {
    py::dict empty;
    return py::type::of(empty.attr(value->name.c_str())());
  }
  case Kind::Function:
    // A function made in the frame has its code, not yet a function object.
    if (!value->object)
      return Handles::get().functionType;
    return py::type::of(value->object);
  case Kind::Constant: {
    // A size that varies is a torch.SymInt during capture, an int in eager.
    const Handles &h = Handles::get();
    if (value->object && symbolic_) {
      PyObject *type =
          reinterpret_cast<PyObject *>(Py_TYPE(value->object.ptr()));
      if (type == h.symInt.ptr())
        return h.builtin("int");
      if (type == h.symFloat.ptr())
        return h.builtin("float");
      if (type == h.symBool.ptr())
        return h.builtin("bool");
    }
    [[fallthrough]];
  }
  case Kind::Module:
  case Kind::Object:
  case Kind::Callable:
  case Kind::PythonModule:
    if (!value->object)
      return py::type::of(py::none());
    return py::type::of(value->object);
  case Kind::Method:
    return Handles::get().methodType;
  default:
    return py::type::of(py::none());
  }
}

void Evaluator::checkNotInput(const VariablePtr &container, const char *what) {
  if (!container->source || container->ownedByFrame)
    return;
  // A list, dict or set of the caller's: changed here, given its final
  // contents after the graph (planSideEffects).
  if (container->is(Kind::Dict) &&
      container->source->kind == Source::Kind::Attr &&
      container->source->name == "__dict__")
    unsupported(std::string(what) + " " + container->source->str() +
                ", the attributes of an object the caller can see (read "
                "through the object, they are modelled apart)");
  if ((container->is(Kind::List) || container->is(Kind::Dict) ||
       container->is(Kind::Set)) &&
      container->object) {
    if (std::find(changedContainers_.begin(), changedContainers_.end(),
                  container) == changedContainers_.end())
      changedContainers_.push_back(container);
    return;
  }
  unsupported(std::string(what) + " " + container->source->str() +
              ", an object the caller can see: kiln cannot replay that side "
              "effect");
}

size_t Evaluator::sequenceIndex(int64_t index, size_t size, const char *what) {
  int64_t count = static_cast<int64_t>(size);
  if (index < 0)
    index += count;
  if (index < 0 || index >= count)
    raisePython(PyExc_IndexError,
                py::str(std::string(what) + "index out of range"));
  return static_cast<size_t>(index);
}

void Evaluator::raisePython(py::handle type, py::object argument) {
  py::object exception = py::reinterpret_borrow<py::object>(type)(argument);
  throw PythonException{exception};
}

void Evaluator::raiseCaptured(py::error_already_set &error) {
  py::object exception = error.value();
  if (!exception || !PyExceptionInstance_Check(exception.ptr()))
    unsupported(std::string("a call that raises during capture: ") +
                error.what());
  throw PythonException{exception};
}

// ---------------------------------------------------------------------------
// Torch calls, recorded on meta tensors.

py::object Evaluator::metaTensorOf(Value *value) {
  auto it = metaTensors_.find(value);
  if (it != metaTensors_.end())
    return it->second;
  const TensorMeta &meta = value->meta();
  if (symbolic_ && meta.isSymbolic())
    unsupported("a symbolic value without a fake tensor");
  py::object tensor =
      symbolic_ ? symbolic_.attr("static")(python::dtypeToTorch(meta.dtype),
                                           meta.sizes, meta.strides,
                                           meta.storageOffset)
                : Handles::get().metaTensor(
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
      return structBuilder(value->object)(py::tuple(items));
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
  if (isConstantObject(object)) // SymInts of a symbolic capture included
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

namespace {

/// Folds a tensor's device into the device of an op's tensors, as torch
/// picks it: a 0-d CPU tensor mixes with any device, so another tensor's
/// device wins over it.
void foldDevice(const TensorMeta &meta, std::optional<Device> &device) {
  bool cpuScalar = meta.dim() == 0 && meta.device.type == DeviceType::CPU;
  if (!device || !cpuScalar)
    device = meta.device;
}

/// Folds the devices of the graph tensors in `value` (nested in sequences
/// and dicts) into `device`.
void considerDevices(const VariablePtr &value, std::optional<Device> &device) {
  if (value->kind == Kind::Tensor) {
    foldDevice(value->tensor->meta(), device);
  } else if (value->kind == Kind::Tuple || value->kind == Kind::List ||
             value->kind == Kind::Dict) {
    for (const VariablePtr &item : value->items)
      considerDevices(item, device);
  }
}

} // namespace

VariablePtr Evaluator::torchCall(
    py::handle function, const std::vector<VariablePtr> &args,
    const std::vector<std::pair<std::string, VariablePtr>> &kwargs) {
  py::list traceArgs;
  std::optional<Device> device;
  for (const VariablePtr &arg : args) {
    traceArgs.append(toTraceObject(arg));
    considerDevices(arg, device);
  }
  py::dict traceKwargs;
  for (const auto &[name, value] : kwargs) {
    traceKwargs[py::str(name)] = toTraceObject(value);
    considerDevices(value, device);
  }
  py::tuple traced;
  try {
    // The meta tensors stand for tensors on `device`: torch's meta kernels
    // model CUDA where a result depends on the device.
    traced = Handles::get().traceCall(
        function, py::tuple(traceArgs), traceKwargs,
        device ? python::deviceToTorch(*device) : py::none(),
        symbolic_ ? symbolic_ : py::none());
  } catch (py::error_already_set &error) {
    std::string message = error.what();
    failedOnSymbolicSizes_ = static_cast<bool>(symbolic_);
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
    auto argumentOf = [&](py::handle arg) {
      if (symbolic_)
        if (std::optional<Argument> symbolic = symbolicArgument(arg))
          return *symbolic;
      return python::argumentFromPython(arg, tensorValue);
    };
    std::vector<Argument> positional;
    for (py::handle arg : record[1])
      positional.push_back(argumentOf(arg));
    std::vector<std::pair<std::string, Argument>> keywords;
    for (auto entry : py::reinterpret_borrow<py::dict>(record[2]))
      keywords.emplace_back(entry.first.cast<std::string>(),
                            argumentOf(entry.second));
    // Torch's metadata, on the device the program runs on: that of the
    // tensor arguments, in lists too (cat's, index's; a 0-d CPU tensor
    // mixes with any device), or the factory's device argument.
    std::optional<Device> device;
    auto consider = [&](const Argument &argument) {
      if (argument.isTensor())
        foldDevice(argument.toTensor()->meta(), device);
      else if (argument.isTensorList())
        for (const Value *item : argument.toTensorList())
          if (item)
            foldDevice(item->meta(), device);
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
    // The layouts as the op left them: a later op of the same call may have
    // changed its results in place since (resize_, unsqueeze_).
    std::vector<py::object> resultTensors;
    std::vector<std::shared_ptr<const SymbolicLayout>> resultLayouts;
    python::TorchResults results;
    py::list layouts = py::reinterpret_borrow<py::list>(record[4]);
    size_t flatIndex = 0;
    std::function<void(py::handle)> collect = [&](py::handle out) {
      if (python::isTensor(out)) {
        TensorMeta meta;
        if (symbolic_) {
          // Reading a fake tensor's sizes as ints would specialise them.
          meta.dtype = python::dtypeFromTorch(out.attr("dtype"));
          if (flatIndex >= layouts.size() || layouts[flatIndex].is_none())
            unsupported("a traced result without its layout");
          resultLayouts.push_back(
              symbolTable_.layoutOf(py::tuple(layouts[flatIndex])[3]));
        } else {
          meta = python::tensorMetaOf(out);
        }
        meta.device = device.value_or(Device());
        if (flatIndex < layouts.size() && !layouts[flatIndex].is_none()) {
          py::tuple layout = layouts[flatIndex];
          meta.sizes = layout[0].cast<std::vector<int64_t>>();
          meta.strides = layout[1].cast<std::vector<int64_t>>();
          meta.storageOffset = layout[2].cast<int64_t>();
        }
        ++flatIndex;
        results.add(meta);
        resultTensors.push_back(py::reinterpret_borrow<py::object>(out));
      } else if (out.is_none()) {
        results.add(std::nullopt);
        resultTensors.emplace_back();
        resultLayouts.emplace_back();
        ++flatIndex;
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
      if (symbolic_ && resultLayouts.at(i))
        values[i]->setSymbolicLayout(resultLayouts[i]);
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
    if (name == "shape") {
      if (meta.isSymbolic())
        return Variable::constant(metaTensorOf(base->tensor).attr("shape"));
      return Variable::constant(h.sizeType(py::cast(meta.sizes)));
    }
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
    if (name == "data") {
      // The same storage without autograd history: detach's alias.
      std::vector<VariablePtr> none;
      std::vector<std::pair<std::string, VariablePtr>> noKeywords;
      return callTensorMethod(base, "detach", none, noKeywords);
    }
    if (name == "requires_grad" || name == "grad" || name == "grad_fn" ||
        name == "_version")
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
    if (VariablePtr written = writtenAttribute(base, name))
      return written;
    py::object object = base->object;
    py::object attribute;
    try {
      attribute = object.attr(name.c_str());
    } catch (py::error_already_set &error) {
      if (!error.matches(PyExc_AttributeError))
        unsupported(typeName(object) + " has no attribute '" + name + "'");
      // Missing, as guarded: a try block may catch the AttributeError.
      if (base->source)
        guards_.addCheck(base->source, frontend::hasAttribute(name, false));
      raiseCaptured(error);
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
    VariablePtr result = wrap(attribute, attrSource());
    // What an object made from constants holds is made from them too.
    if (base->ownedByFrame && !base->source && result->is(Kind::Object))
      result->ownedByFrame = true;
    return result;
  }
  case Kind::PythonModule: {
    if (VariablePtr written = writtenAttribute(base, name))
      return written;
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
    // A callable object of a user class (its __call__ inlined, say) is
    // mutable state like any object: what is read of it is guarded.
    py::handle type = py::type::of(base->object);
    if (base->is(Kind::Callable) && base->source &&
        (reinterpret_cast<PyTypeObject *>(type.ptr())->tp_flags &
         Py_TPFLAGS_HEAPTYPE) &&
        !isTorchModuleName(moduleOf(type)))
      return wrap(attribute, attrSource());
    // A nested function is guarded by its code only: its name, defaults
    // and other attributes are read through its source.
    if (readThroughSource(*base))
      return wrap(attribute, attrSource());
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
      py::object probe = structBuilder(base->object)(py::tuple(placeholders));
      py::object index = py::getattr(probe, name.c_str(), py::none());
      if (PyLong_Check(index.ptr()))
        return base->items.at(index.cast<size_t>());
      // A namedtuple's methods (_asdict, _replace, a NamedTuple's own) are
      // inlined; its class attributes (_fields) are constants.
      if (PyObject *attribute = lookUpOnType(base->object, name)) {
        if (PyFunction_Check(attribute)) {
          auto method = Variable::make(Kind::Method);
          method->object = py::reinterpret_borrow<py::object>(attribute);
          method->items.push_back(base);
          return method;
        }
        if (Py_IS_TYPE(attribute, &PyClassMethod_Type)) {
          // A Python classmethod (_make) bound to the class.
          py::object function = py::handle(attribute).attr("__func__");
          if (PyFunction_Check(function.ptr())) {
            auto method = Variable::make(Kind::Method);
            method->object = function;
            method->items.push_back(wrap(base->object, nullptr));
            return method;
          }
        }
        if (!lookUpOnType(py::type::of(py::tuple()), name) &&
            isConstantObject(attribute))
          return Variable::constant(
              py::reinterpret_borrow<py::object>(attribute));
      }
    }
    [[fallthrough]];
  case Kind::List:
  case Kind::Dict: {
    auto method = Variable::make(Kind::Method);
    method->name = name;
    method->items.push_back(base);
    return method;
  }
  case Kind::Instance:
    return instanceAttribute(base, name, true);
  case Kind::Set: {
    auto method = Variable::make(Kind::Method);
    method->name = name;
    method->items.push_back(base);
    return method;
  }
  case Kind::Super: {
    const VariablePtr &self = base->items.at(0);
    if (self->is(Kind::Instance) ||
        ((self->is(Kind::Object) || self->is(Kind::Module)) && self->object))
      return superAttribute(base, name);
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
  case Kind::Method:
    // A bound method's object and function (a method of a Python class;
    // builtin container methods have no function object here).
    if (name == "__self__")
      return base->items.at(0);
    if (name == "__func__" && base->object &&
        PyFunction_Check(base->object.ptr())) {
      auto function = Variable::make(Kind::Function);
      function->object = base->object;
      return function;
    }
    if ((name == "__name__" || name == "__qualname__") && base->object)
      return Variable::constant(base->object.attr(name.c_str()));
    unsupported("attribute '" + name + "' of a method");
  default:
    unsupported("attribute '" + name + "' of a " +
                kindNameOf(pythonTypeOf(base)));
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
    // The template returns this object on every hit: one read from the
    // frame's inputs must be that object on every call (a type guard alone
    // returned the first call's geqrf result for later calls).
    if (value->source && !value->is(Kind::Constant))
      guards_.addCheck(value->source, identity(value->object));
    if (holdsVaryingSize(value->object))
      unsupported("returning a size that varies between calls");
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
      result.constant = structBuilder(value->object);
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
  // Factories, Python float operands and type promotion read it; kiln's
  // meta functions and lowerings assume float32.
  GuardCheck dtypeCheck = defaultDType();
  guards_.addCheck(nullptr, dtypeCheck);
  if (!dtypeCheck.expected.is(Handles::get().torch.attr("float32")))
    unsupported("torch's default dtype is " +
                py::str(dtypeCheck.expected).cast<std::string>() +
                " (set by torch.set_default_dtype); kiln captures under the "
                "default float32 only");
  bool initialGradMode = gradEnabled_;

  VariablePtr returned = runFrame(frame);
  if (stopped_)
    return captureAtBreak(frame, initialGradMode);
  // The graph leaves grad mode as the caller had it (a `with` block
  // restores it already); an unbalanced frame's own last mode is set after
  // the graph.
  std::optional<bool> finalGradMode;
  if (gradEnabled_ != initialGradMode)
    finalGradMode = gradEnabled_;
  setGradMode(initialGradMode);

  // An object the frame read returns as this call's object (a read), not
  // as the capture's under an identity guard that every new object fails.
  std::function<bool(const VariablePtr &)> returnsReadObject =
      [&](const VariablePtr &value) {
        switch (value->kind) {
        case Kind::Tuple:
        case Kind::List:
        case Kind::Dict:
          return std::any_of(value->items.begin(), value->items.end(),
                             returnsReadObject);
        case Kind::Object:
          return value->source != nullptr;
        default:
          return false;
        }
      };
  Capture capture;
  capture.finalGradMode = finalGradMode;
  if (writes_.empty() && changedContainers_.empty() && !madeInstances_ &&
      !returnsReadObject(returned)) {
    std::vector<Argument> outputs;
    capture.output = buildOutput(returned, outputs);
    graph_->setOutputs(std::move(outputs));
  } else {
    auto plan = std::make_shared<RebuildPlan>();
    Rebuilder rebuilder{*plan, {}, {}, {}, {}, {}};
    plan->result = rebuild(returned, rebuilder);
    planSideEffects(rebuilder);
    graph_->setOutputs(std::move(rebuilder.outputs));
    capture.replay = std::move(plan);
  }
  if (symbolic_)
    addSizeRelations();
  capture.graph = graph_;
  capture.guards = std::move(guards_);
  capture.notes = std::move(notes_);
  return capture;
}

// ---------------------------------------------------------------------------
// Dynamic shapes.

std::vector<int64_t> Evaluator::dynamicDims(py::handle tensor,
                                            const SourcePtr &source,
                                            const TensorMeta &meta) {
  if (!dynamic_ || dynamic_->mode == DynamicPolicy::Mode::Never)
    return {};
  auto dimsIn = [&](const char *attribute) {
    std::set<int64_t> dims;
    py::object marked = py::getattr(tensor, attribute, py::none());
    if (!marked.is_none())
      for (py::handle dim : marked)
        dims.insert(dim.cast<int64_t>());
    return dims;
  };
  std::set<int64_t> dims = dimsIn("_kiln_dynamic_dims");
  for (int64_t dim : dimsIn("_dynamo_dynamic_indices"))
    dims.insert(dim);
  if (dynamic_->mode == DynamicPolicy::Mode::Always) {
    // Parameters and buffers keep their shapes; inputs vary.
    if (Py_TYPE(tensor.ptr()) ==
        reinterpret_cast<PyTypeObject *>(Handles::get().tensorType.ptr()))
      for (int64_t d = 0; d < meta.dim(); ++d)
        dims.insert(d);
  } else {
    auto learned = dynamic_->learned.find(source->str());
    if (learned != dynamic_->learned.end())
      dims.insert(learned->second.begin(), learned->second.end());
  }
  for (int64_t dim : dimsIn("_kiln_static_dims"))
    dims.erase(dim);
  std::vector<int64_t> result;
  for (int64_t dim : dims)
    if (dim >= 0 && dim < meta.dim() && meta.sizes[dim] >= 2)
      result.push_back(dim);
  return result;
}

bool Evaluator::holdsVaryingSize(py::handle object) const {
  return symbolic_ &&
         SymbolTable::module().attr("contains_symbolic")(object).cast<bool>();
}

py::object Evaluator::specializeSizes(py::object object) {
  if (!holdsVaryingSize(object))
    return object;
  return SymbolTable::module().attr("specialize")(object);
}

std::optional<Argument> Evaluator::symbolicArgument(py::handle argument) {
  if (!SymbolTable::module().attr("contains_symbolic")(argument).cast<bool>())
    return std::nullopt;
  if (PyList_Check(argument.ptr()) || PyTuple_Check(argument.ptr())) {
    std::vector<int64_t> hints;
    std::vector<SymSize> exprs;
    for (py::handle item : argument) {
      auto [hint, expr] = symbolTable_.sizeOfValue(item);
      hints.push_back(hint);
      exprs.push_back(expr);
    }
    return Argument::symbolicIntList(std::move(hints), std::move(exprs));
  }
  auto [hint, expr] = symbolTable_.sizeOfValue(argument);
  return Argument::symbolicInt(hint, expr);
}

void Evaluator::addSizeRelations() {
  std::vector<SizeRelation> relations;
  py::list described;
  try {
    described = symbolic_.attr("guards")();
  } catch (py::error_already_set &error) {
    unsupported(std::string("a size guard kiln cannot check (") + error.what() +
                ")");
  }
  static const std::map<std::string, SizeRelation::Op> ops = {
      {"==", SizeRelation::Op::Eq}, {"!=", SizeRelation::Op::Ne},
      {"<", SizeRelation::Op::Lt},  {"<=", SizeRelation::Op::Le},
      {">", SizeRelation::Op::Gt},  {">=", SizeRelation::Op::Ge}};
  for (py::handle item : described) {
    py::tuple relation = py::reinterpret_borrow<py::tuple>(item);
    relations.push_back({ops.at(relation[0].cast<std::string>()),
                         symbolTable_.sizeOf(relation[1]),
                         symbolTable_.sizeOf(relation[2])});
  }
  if (symbolTable_.size() != graph_->symbols().size())
    unsupported("a size symbol that no input dimension gives");
  guards_.setSizeRelations(static_cast<int64_t>(graph_->symbols().size()),
                           std::move(relations));
}

} // namespace kiln::frontend::evaluation

namespace kiln::frontend {

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

Capture captureFunction(py::handle function, const FrameInputs &inputs,
                        bool allowBreaks, const DynamicPolicy *dynamic) {
  // A break's plan may not hold a size that varies (rebuild refuses one).
  evaluation::Evaluator evaluator(inputs, dynamic);
  try {
    return evaluator.run(function);
  } catch (const Unsupported &error) {
    if (!allowBreaks || !evaluator.failedInRootFrame() ||
        evaluator.failedOnSymbolicSizes() || evaluator.failedInExceptBlock())
      throw;
    // A graph break before the root frame's instruction that failed (the
    // call that entered an inlined chain, if the failure was in there).
    // Capture again from the start, stopping there: the first capture may
    // have recorded part of that instruction's work.
    std::string reason = error.what();
    // "why [at where]" becomes "why; no graph break: refusal [at where]".
    auto refused = [&](const std::string &refusal) {
      size_t at = reason.rfind(" [at ");
      std::string suffix = at == std::string::npos ? "" : reason.substr(at);
      return Unsupported(reason.substr(0, at) + "; no graph break: " + refusal +
                         suffix);
    };
    py::object refusal = py::module_::import("kiln._resume")
                             .attr("refusal")(function.attr("__code__"),
                                              evaluator.failedOffset());
    if (!refusal.is_none())
      throw refused(refusal.cast<std::string>());
    evaluation::Evaluator resumed(inputs, dynamic);
    resumed.stopBefore(evaluator.failedStep(), evaluator.failedPc(), reason);
    try {
      return resumed.run(function);
    } catch (const Unsupported &error) {
      throw refused(error.what());
    }
  }
}

} // namespace kiln::frontend
