// The symbolic evaluator's calls: builtins, methods of containers and
// tensors, torch functions, and the inlining of Python functions and
// nn.Module calls. Depends on frontend/Evaluator.h, bridge/, pybind11.
#include "frontend/Evaluator.h"

#include "bridge/PythonConversion.h"

#include <algorithm>

namespace kiln::frontend::evaluation {

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

std::vector<VariablePtr> Evaluator::sortedItems(
    const std::vector<VariablePtr> &items,
    const std::vector<std::pair<std::string, VariablePtr>> &kwargs) {
  VariablePtr key;
  bool reverse = false;
  for (const auto &[name, value] : kwargs) {
    if (name == "key") {
      if (!value->is(Kind::Constant) || !value->object.is_none())
        key = value;
    } else if (name == "reverse") {
      std::optional<py::object> flag = asConstant(value);
      if (!flag)
        unsupported("sorting with a reverse flag that is not a constant");
      reverse = PyObject_IsTrue(flag->ptr()) == 1;
    } else {
      unsupported("sorting with the keyword argument " + name);
    }
  }
  // The keys (the items, or what the key function gives for each, called
  // once per item in order as Python does) must be constants; Python's own
  // sort orders them, stably.
  // A tuple key with a tensor after constants (sorted(d.items()) of a
  // dict of tensors) sorts as long as the constants decide: the tensor
  // stands as an object that raises when compared (one per key, so that
  // no identity shortcut compares two as equal).
  const Handles &h = Handles::get();
  auto incomparable = [&]() {
    unsupported("sorting by values that are not constants (tensors: "
                "data-dependent)");
  };
  py::list keys;
  for (const VariablePtr &item : items) {
    VariablePtr keyValue;
    if (std::optional<py::object> constant = constantKey(item, key, keyValue)) {
      keys.append(*constant);
      continue;
    }
    if (!keyValue->is(Kind::Tuple) ||
        (keyValue->object && !keyValue->object.is_none()))
      incomparable();
    py::list parts;
    for (const VariablePtr &part : keyValue->items) {
      std::optional<py::object> value = asConstant(part);
      if (!value || part->is(Kind::Module)) {
        parts.append(h.incomparableKey());
        break;
      }
      parts.append(*value);
    }
    keys.append(py::tuple(parts));
  }
  py::object order;
  try {
    order = h.builtin("sorted")(h.builtin("range")(items.size()),
                                py::arg("key") = keys.attr("__getitem__"),
                                py::arg("reverse") = reverse);
  } catch (py::error_already_set &) {
    incomparable();
  }
  std::vector<VariablePtr> sorted;
  for (py::handle index : order)
    sorted.push_back(items.at(index.cast<size_t>()));
  return sorted;
}

std::optional<py::object> Evaluator::constantKey(const VariablePtr &item,
                                                 const VariablePtr &key,
                                                 VariablePtr &keyValue) {
  keyValue = key ? call(key, {item}, {}) : item;
  std::optional<py::object> constant = asConstant(keyValue);
  if (keyValue->is(Kind::Module))
    return std::nullopt;
  return constant;
}

std::pair<py::list, py::dict> Evaluator::constantArguments(
    const std::vector<VariablePtr> &args,
    const std::vector<std::pair<std::string, VariablePtr>> &kwargs,
    const std::string &refusal) {
  py::list constantArgs;
  py::dict constantKwargs;
  for (const VariablePtr &arg : args) {
    std::optional<py::object> constant = asConstant(arg);
    if (!constant)
      unsupported(refusal);
    constantArgs.append(*constant);
  }
  for (const auto &[name, value] : kwargs) {
    std::optional<py::object> constant = asConstant(value);
    if (!constant)
      unsupported(refusal);
    constantKwargs[py::str(name)] = *constant;
  }
  return {constantArgs, constantKwargs};
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
      size_t index = sequenceIndex(
          args.empty() ? -1 : asConstant(args[0]).value().cast<int64_t>(),
          self->items.size(), "pop ");
      VariablePtr item = self->items[index];
      self->items.erase(self->items.begin() + index);
      return item;
    }
    if (name == "copy" && args.empty())
      return Variable::sequence(Kind::List, self->items);
    if (name == "reverse" && args.empty()) {
      checkNotInput(self, "reversing");
      std::reverse(self->items.begin(), self->items.end());
      return none;
    }
    if (name == "clear" && args.empty()) {
      checkNotInput(self, "clearing");
      self->items.clear();
      return none;
    }
  }
  if (self->kind == Kind::Dict) {
    auto findKey = [&](const py::object &key) -> int {
      for (size_t i = 0; i < self->keys.size(); ++i)
        if (self->keys[i].equal(key))
          return static_cast<int>(i);
      return -1;
    };
    if (name == "keys" || name == "values" || name == "items") {
      // A view sees later insertions: it reads the dict when used.
      auto view = Variable::make(Kind::DictView);
      view->items.push_back(self);
      view->name = name;
      return view;
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
        raisePython(PyExc_KeyError, *key);
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
    if (name == "popitem" && args.size() <= 1) {
      // popitem(last=True): OrderedDict's may take the first item.
      std::optional<py::object> last =
          args.empty() ? std::optional<py::object>(py::bool_(true))
                       : asConstant(args[0]);
      if (!last)
        unsupported("popitem with a symbolic `last`");
      if (self->keys.empty())
        raisePython(PyExc_KeyError, py::str("popitem(): dictionary is empty"));
      checkNotInput(self, "popping from");
      size_t at = PyObject_IsTrue(last->ptr()) ? self->keys.size() - 1 : 0;
      VariablePtr pair = Variable::sequence(
          Kind::Tuple, {Variable::constant(self->keys[at]), self->items[at]});
      self->keys.erase(self->keys.begin() + static_cast<std::ptrdiff_t>(at));
      self->items.erase(self->items.begin() + static_cast<std::ptrdiff_t>(at));
      return pair;
    }
    if (name == "move_to_end" && (args.size() == 1 || args.size() == 2)) {
      std::optional<py::object> key = asConstant(args[0]);
      std::optional<py::object> last =
          args.size() == 2 ? asConstant(args[1])
                           : std::optional<py::object>(py::bool_(true));
      if (!key || !last)
        unsupported("move_to_end with a symbolic key or `last`");
      int index = findKey(*key);
      if (index < 0)
        raisePython(PyExc_KeyError, *key);
      checkNotInput(self, "reordering");
      py::object movedKey = self->keys[size_t(index)];
      VariablePtr moved = self->items[size_t(index)];
      self->keys.erase(self->keys.begin() + index);
      self->items.erase(self->items.begin() + index);
      if (PyObject_IsTrue(last->ptr())) {
        self->keys.push_back(movedKey);
        self->items.push_back(moved);
      } else {
        self->keys.insert(self->keys.begin(), movedKey);
        self->items.insert(self->items.begin(), moved);
      }
      return none;
    }
    if (name == "clear" && args.empty()) {
      checkNotInput(self, "clearing");
      self->keys.clear();
      self->items.clear();
      return none;
    }
    if (name == "__contains__" && args.size() == 1)
      return Variable::constant(
          py::bool_(findKey(asConstant(args[0]).value()) >= 0));
    if ((name == "__getitem__" && args.size() == 1) ||
        (name == "__setitem__" && args.size() == 2)) {
      std::optional<py::object> key = asConstant(args[0]);
      if (!key)
        unsupported("a dict key that is not a constant");
      int index = findKey(*key);
      if (name == "__getitem__") {
        if (index < 0)
          raisePython(PyExc_KeyError, *key);
        return self->items[index];
      }
      checkNotInput(self, "assigning into");
      if (index >= 0) {
        self->items[index] = args[1];
      } else {
        self->keys.push_back(*key);
        self->items.push_back(args[1]);
      }
      return none;
    }
  }
  if (self->kind == Kind::Tuple || self->kind == Kind::List) {
    bool search = name == "index" || name == "count" ||
                  (name == "remove" && self->kind == Kind::List);
    if (search && !args.empty() && args.size() <= (name == "index" ? 3u : 1u)) {
      // Python compares by identity first, then ==: the same variable
      // matches, constants compare by value, anything else is unknown.
      std::optional<py::object> item = asConstant(args[0]);
      auto matches = [&](const VariablePtr &candidate) -> bool {
        if (candidate == args[0])
          return true;
        std::optional<py::object> value = asConstant(candidate);
        if (item && value && !candidate->is(Kind::Module) &&
            !args[0]->is(Kind::Module))
          return value->equal(*item);
        unsupported("list." + name + " of an item compared with a " +
                    kindNameOf(pythonTypeOf(candidate)));
      };
      int64_t size = static_cast<int64_t>(self->items.size());
      auto bound = [&](size_t at, int64_t fallback) {
        if (args.size() <= at)
          return fallback;
        int64_t value = asConstant(args[at]).value().cast<int64_t>();
        value = value < 0 ? std::max<int64_t>(0, value + size)
                          : std::min(value, size);
        return value;
      };
      int64_t start = bound(1, 0), stop = bound(2, size);
      int64_t found = 0;
      for (int64_t i = start; i < stop; ++i) {
        if (!matches(self->items[static_cast<size_t>(i)]))
          continue;
        if (name == "count") {
          ++found;
          continue;
        }
        if (name == "index")
          return Variable::constant(py::int_(i));
        checkNotInput(self, "removing from");
        self->items.erase(self->items.begin() + i);
        return none;
      }
      if (name == "count")
        return Variable::constant(py::int_(found));
      raisePython(PyExc_ValueError,
                  py::str("list." + name + "(x): x not in list"));
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
  if (meta.isSymbolic() && (name == "size" || name == "stride" ||
                            name == "numel" || name == "nelement")) {
    // Sizes that vary between calls: torch's SymInts, from the fake tensor.
    py::object fake = metaTensorOf(self->tensor);
    std::optional<int64_t> dim =
        name == "numel" || name == "nelement" ? std::nullopt : dimArgument();
    if (dim)
      return Variable::constant(fake.attr(name.c_str())(*dim));
    if (name == "nelement")
      return Variable::constant(fake.attr("numel")());
    return Variable::constant(fake.attr(name.c_str())());
  }
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
  if (is("bool") && args.size() == 1 && kwargs.empty() &&
      !args[0]->is(Kind::Constant))
    return Variable::constant(py::bool_(truthy(args[0]))); // __bool__, __len__
  if (is("len") && args.size() == 1) {
    const VariablePtr &value = args[0];
    switch (value->kind) {
    case Kind::Tuple:
    case Kind::List:
    case Kind::Dict:
      return Variable::constant(py::int_(value->items.size()));
    case Kind::DictView:
      return Variable::constant(py::int_(value->items.at(0)->items.size()));
    case Kind::Tensor:
      if (value->tensor->meta().dim() == 0)
        unsupported("len() of a 0-d tensor");
      if (value->tensor->meta().isSymbolic()) // specialises, with a guard
        return Variable::constant(
            metaTensorOf(value->tensor).attr("__len__")());
      return Variable::constant(py::int_(value->tensor->meta().sizes[0]));
    case Kind::Module: {
      if (value->source) {
        GuardCheck length{GuardCheck::Kind::Length, {}, {}};
        length.length = py::len(value->object);
        guards_.addCheck(value->source, length);
      }
      return Variable::constant(py::int_(py::len(value->object)));
    }
    case Kind::Set:
      return Variable::constant(py::int_(PySet_GET_SIZE(value->object.ptr())));
    default:
      if (VariablePtr length = callPythonSpecialMethod(value, "__len__", {}))
        return length;
      if (value->is(Kind::Object) && value->ownedByFrame && !value->source &&
          py::hasattr(value->object, "__len__"))
        return Variable::constant(py::int_(py::len(value->object)));
      if (VariablePtr contents = builtinContents(value, "__len__");
          contents != value)
        return Variable::constant(py::int_(contents->items.size()));
      break;
    }
  }
  // Values the evaluator models without their Python type: an iterator
  // the frame made (map, zip, a generator, a Python model's), a grad-mode
  // context, super(). isinstance and type() of them are not answered.
  auto checkTypeKnown = [&](const VariablePtr &value) {
    if (value->is(Kind::Iterator) || value->is(Kind::GradContext) ||
        value->is(Kind::GradRestore) || value->is(Kind::Super) ||
        value->is(Kind::Cell))
      unsupported("the type of an iterator, context or super() the frame "
                  "made");
  };
  if (is("isinstance") && args.size() == 2)
    checkTypeKnown(args[0]);
  if (is("type") && args.size() == 1)
    checkTypeKnown(args[0]);
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
      // A size that varies (a torch.SymInt) is checked by its eager type.
      if (object && !(args[0]->is(Kind::Constant) && holdsVaryingSize(*object)))
        return Variable::constant(
            py::bool_(PyObject_IsInstance(object->ptr(), classes->ptr()) == 1));
      return Variable::constant(
          py::bool_(PyObject_IsSubclass(type.ptr(), classes->ptr()) == 1));
    }
  }
  if (is("next")) {
    // Only iterators the frame made advance here; next() on a real Python
    // iterator would consume it during capture.
    if ((args.size() != 1 && args.size() != 2) || !kwargs.empty())
      unsupported("next() with " + std::to_string(args.size()) + " arguments");
    if (!args[0]->is(Kind::Iterator))
      unsupported("next() of a " + kindNameOf(pythonTypeOf(args[0])));
    VariablePtr &iterator = args[0];
    if (iteratorIsStale(*iterator))
      unsupported("next() of an iterator over a list changed since, or of "
                  "one an unfinished enumerate or zip reads");
    if (iterator->position < iterator->items.size())
      return iterator->items[iterator->position++];
    if (args.size() == 2)
      return args[1];
    raisePython(PyExc_StopIteration, py::none());
  }
  if (is("sorted") && args.size() == 1) {
    std::vector<VariablePtr> items = unpack(args[0]);
    return Variable::sequence(Kind::List, sortedItems(items, kwargs));
  }
  if ((is("set") || is("frozenset")) && args.size() == 1 && kwargs.empty() &&
      !args[0]->is(Kind::Constant) && !args[0]->is(Kind::Tensor)) {
    // set(d), frozenset(keys): a set of the (constant) items.
    auto elements = Variable::make(Kind::Set);
    elements->object = py::set();
    for (const VariablePtr &item : unpack(args[0]))
      addToSet(elements, item);
    if (is("frozenset"))
      return Variable::constant(py::reinterpret_steal<py::object>(
          PyFrozenSet_New(elements->object.ptr())));
    return setFromObject(elements->object);
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
    // Python's enumerate, zip and reversed read a list argument as they go:
    // the iterator made here holds a spent iterator of the list, which
    // makes it stale (iteratorIsStale) once the list changes, and keeps a
    // graph break from leaving it as a tuple of the rest.
    // An iterator argument reads its lists the same way (a list's own, an
    // enumerate or zip of lists): the one made here reads them too.
    auto readsList = [&](const VariablePtr &made, const VariablePtr &arg) {
      std::vector<VariablePtr> lists;
      if (arg->is(Kind::List))
        lists.push_back(arg);
      else if (arg->is(Kind::Iterator))
        listsReadBy(*arg, lists);
      for (const VariablePtr &list : lists) {
        VariablePtr spent = iterate(list);
        spent->position = spent->items.size();
        made->cells.push_back(spent);
      }
    };
    // What a graph break makes the iterator again from: a list or an
    // iterator as it is, anything else as an iterator over its items.
    auto recipeSource = [&](Variable::Recipe &recipe, const VariablePtr &arg) {
      bool live = arg->is(Kind::List) || arg->is(Kind::Iterator);
      recipe.sources.push_back(live ? arg : iterate(arg));
      recipe.from.push_back(arg->is(Kind::Iterator) ? arg->position : 0);
    };
    bool startKeyword = kwargs.size() == 1 && kwargs[0].first == "start";
    if (is("enumerate") &&
        ((args.size() == 1 && (kwargs.empty() || startKeyword)) ||
         (args.size() == 2 && kwargs.empty()))) {
      const VariablePtr *first = args.size() == 2 ? &args[1]
                                 : startKeyword   ? &kwargs[0].second
                                                  : nullptr;
      std::optional<py::object> from =
          first ? asConstant(*first) : std::optional<py::object>(py::int_(0));
      if (!from || !PyLong_Check(from->ptr()))
        unsupported("enumerate with a start that is not a constant int");
      int64_t start = from->cast<int64_t>();
      auto iterator = Variable::make(Kind::Iterator);
      auto recipe = std::make_shared<Variable::Recipe>();
      recipe->how = "enumerate";
      recipe->start = start;
      recipeSource(*recipe, args[0]);
      iterator->recipe = recipe;
      for (const VariablePtr &item : unpack(args[0]))
        iterator->items.push_back(Variable::sequence(
            Kind::Tuple, {Variable::constant(py::int_(start++)), item}));
      // Python's enumerate takes the items as it goes: the iterator it
      // reads is stale until the enumerate is done.
      if (args[0]->is(Kind::Iterator))
        args[0]->cells.push_back(iterator);
      readsList(iterator, args[0]);
      return iterator;
    }
    if (is("zip") && kwargs.empty()) {
      // Python's zip takes one item of each argument's iterator in turn and
      // stops at the first that is exhausted (the items taken in that round
      // are lost); zip(it, it) pairs an iterator's items.
      std::vector<VariablePtr> sources;
      auto iterator = Variable::make(Kind::Iterator);
      auto recipe = std::make_shared<Variable::Recipe>();
      recipe->how = "zip";
      for (const VariablePtr &arg : args) {
        if (arg->is(Kind::Iterator) && iteratorIsStale(*arg))
          unsupported("zip of an iterator over a list changed since");
        sources.push_back(arg->is(Kind::Iterator) ? arg : iterate(arg));
        recipe->sources.push_back(arg->is(Kind::List) ? arg : sources.back());
        recipe->from.push_back(sources.back()->position);
      }
      iterator->recipe = recipe;
      while (!sources.empty()) {
        std::vector<VariablePtr> row;
        for (const VariablePtr &source : sources) {
          if (source->position >= source->items.size())
            break;
          row.push_back(source->items[source->position++]);
        }
        if (row.size() < sources.size())
          break;
        iterator->items.push_back(
            Variable::sequence(Kind::Tuple, std::move(row)));
      }
      for (const VariablePtr &arg : args) {
        if (arg->is(Kind::Iterator))
          arg->cells.push_back(iterator);
        readsList(iterator, arg);
      }
      return iterator;
    }
    if (is("reversed") && args.size() == 1) {
      auto iterator = Variable::make(Kind::Iterator);
      std::vector<VariablePtr> items = unpack(args[0]);
      iterator->items.assign(items.rbegin(), items.rend());
      if (args[0]->is(Kind::List)) {
        auto recipe = std::make_shared<Variable::Recipe>();
        recipe->how = "reversed";
        recipe->sources.push_back(args[0]);
        iterator->recipe = recipe;
      }
      readsList(iterator, args[0]);
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
  if ((is("getattr") || is("hasattr")) &&
      (args.size() == 2 || (is("getattr") && args.size() == 3))) {
    std::optional<py::object> name = asConstant(args[1]);
    if (!name || !PyUnicode_Check(name->ptr()))
      unsupported(std::string(is("getattr") ? "getattr" : "hasattr") +
                  " with a non-constant name");
    std::string attribute = name->cast<std::string>();
    if (is("hasattr"))
      return hasAttribute(args[0], attribute);
    // With a default, a missing attribute (guarded as missing) gives it.
    if (args.size() == 3 && !truthy(hasAttribute(args[0], attribute)))
      return args[2];
    return loadAttr(args[0], attribute);
  }
  if (is("vars")) {
    // vars(obj) is obj.__dict__ (vars() reads the caller's locals: not
    // modelled).
    if (args.size() != 1 || !kwargs.empty())
      unsupported("vars() without one object");
    if (!truthy(hasAttribute(args[0], "__dict__")))
      unsupported("vars() of an object without __dict__");
    return loadAttr(args[0], "__dict__");
  }
  if (is("dict") && args.size() <= 1 &&
      (args.empty() || !asConstant(args[0]))) {
    // dict(mapping), dict(pairs), dict(**kwargs): a new Dict.
    auto dict = Variable::make(Kind::Dict);
    auto insert = [&](py::object key, const VariablePtr &value) {
      for (size_t i = 0; i < dict->keys.size(); ++i)
        if (dict->keys[i].equal(key)) {
          dict->items[i] = value;
          return;
        }
      dict->keys.push_back(std::move(key));
      dict->items.push_back(value);
    };
    if (!args.empty()) {
      VariablePtr source = builtinContents(args[0], "keys");
      if (source->is(Kind::Dict)) {
        for (size_t i = 0; i < source->keys.size(); ++i)
          insert(source->keys[i], source->items[i]);
      } else {
        for (const VariablePtr &pair : unpack(source)) {
          std::vector<VariablePtr> entry = unpack(pair);
          std::optional<py::object> key =
              entry.size() == 2 ? asConstant(entry[0]) : std::nullopt;
          if (!key)
            unsupported("dict() of items that are not (constant key, "
                        "value) pairs");
          insert(*key, entry[1]);
        }
      }
    }
    for (const auto &[name, value] : kwargs)
      insert(py::str(name), value);
    return dict;
  }
  if (is("setattr") && args.size() == 3 && kwargs.empty()) {
    std::optional<py::object> name = asConstant(args[1]);
    if (!name || !PyUnicode_Check(name->ptr()))
      unsupported("setattr with a non-constant name");
    storeAttr(args[0], name->cast<std::string>(), args[2]);
    return Variable::constant(py::none());
  }
  if (is("type") && args.size() == 1 && kwargs.empty()) {
    return wrap(pythonTypeOf(args[0]), nullptr);
  }
  if (is("callable") && args.size() == 1 && kwargs.empty()) {
    const VariablePtr &value = args[0];
    switch (value->kind) {
    case Kind::Function:
    case Kind::Method:
    case Kind::Callable:
    case Kind::Module:
      return Variable::constant(py::bool_(true));
    case Kind::Tensor:
    case Kind::Tuple:
    case Kind::List:
    case Kind::Dict:
    case Kind::DictView:
    case Kind::Iterator:
      return Variable::constant(py::bool_(false));
    default:
      if (value->object)
        return Variable::constant(
            py::bool_(PyCallable_Check(value->object.ptr()) == 1));
      break;
    }
  }
  if ((is("all") || is("any")) && args.size() == 1 && kwargs.empty() &&
      !asConstant(args[0])) {
    // Python stops at the first item that decides; the items are already
    // made (kiln runs a generator to its end when it unpacks it).
    bool wanted = is("any");
    for (const VariablePtr &item : unpack(args[0]))
      if (truthy(item) == wanted)
        return Variable::constant(py::bool_(wanted));
    return Variable::constant(py::bool_(!wanted));
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
    bool startKeyword =
        args.size() == 1 && kwargs.size() == 1 && kwargs[0].first == "start";
    if (is("sum") && args.size() >= 1 && (kwargs.empty() || startKeyword)) {
      std::vector<VariablePtr> items = unpack(args[0]);
      VariablePtr total = args.size() == 2 ? args[1]
                          : startKeyword   ? kwargs[0].second
                                           : Variable::constant(py::int_(0));
      for (const VariablePtr &item : items) {
        std::optional<py::object> a = asConstant(total), b = asConstant(item);
        if (a && b) {
          PyObject *added = PyNumber_Add(a->ptr(), b->ptr());
          if (!added) {
            PyErr_Clear();
            unsupported("a sum whose addition raises during capture");
          }
          total = Variable::constant(py::reinterpret_steal<py::object>(added));
        } else if (VariablePtr added =
                       userOperator(total, item, "__add__", "__radd__"))
          total = added;
        else
          total = torchCall(h.operatorModule.attr("add"), {total, item}, {});
      }
      return total;
    }
    bool keyed =
        !kwargs.empty() &&
        std::all_of(kwargs.begin(), kwargs.end(), [](const auto &kwarg) {
          return kwarg.first == "key" || kwarg.first == "default";
        });
    if ((is("max") || is("min")) && !args.empty() && keyed) {
      // max(items, key=f) / max(a, b, key=f): the first item whose key (a
      // constant, f called once per item in order) is the largest.
      std::vector<VariablePtr> items =
          args.size() == 1 ? unpack(args[0]) : args;
      VariablePtr key, fallback;
      for (const auto &[name, value] : kwargs)
        (name == "key" ? key : fallback) = value;
      if (fallback && args.size() != 1)
        unsupported("max/min with a default and several arguments");
      if (items.empty()) {
        if (!fallback)
          raisePython(PyExc_ValueError,
                      py::str(std::string(is("max") ? "max" : "min") +
                              "() iterable argument is empty"));
        return fallback;
      }
      if (key && key->is(Kind::Constant) && key->object.is_none())
        key = nullptr; // key=None: the items themselves
      py::list keys;
      for (const VariablePtr &item : items) {
        VariablePtr keyValue;
        std::optional<py::object> constant = constantKey(item, key, keyValue);
        if (!constant)
          unsupported("max/min by keys that are not constants "
                      "(data-dependent)");
        keys.append(*constant);
      }
      py::object index = function(h.builtin("range")(items.size()),
                                  py::arg("key") = keys.attr("__getitem__"));
      return items.at(index.cast<size_t>());
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

VariablePtr Evaluator::pythonCallMethod(const VariablePtr &callable) {
  // An object whose class defines __call__ in Python: the method, bound to
  // the object, is inlined.
  PyObject *dunder = lookUpOnType(pythonTypeOf(callable), "__call__");
  if (!dunder || !PyFunction_Check(dunder))
    return nullptr;
  auto method = Variable::make(Kind::Method);
  method->object = py::reinterpret_borrow<py::object>(dunder);
  method->items.push_back(callable);
  return method;
}

VariablePtr
Evaluator::call(const VariablePtr &callable, std::vector<VariablePtr> args,
                std::vector<std::pair<std::string, VariablePtr>> kwargs) {
  const Handles &h = Handles::get();
  switch (callable->kind) {
  case Kind::Function:
    if (callable->object) {
      for (const py::object &trueFunction : h.alwaysTrue)
        if (callable->object.is(trueFunction))
          return Variable::constant(py::bool_(true));
      for (const py::object &falseFunction : h.alwaysFalse)
        if (callable->object.is(falseFunction))
          return Variable::constant(py::bool_(false));
    }
    if (callable->object && isTorchModuleName(moduleOf(callable->object)))
      return torchCall(callable->object, args, kwargs);
    if (callable->object)
      if (py::object model = h.polyfillFor(callable->object)) {
        // A Python function of the standard library that calls into C
        // (heapq.nlargest): its model instead.
        auto inlined = Variable::make(Kind::Function);
        inlined->object = model;
        return inlineFunction(inlined, std::move(args), std::move(kwargs));
      }
    return inlineFunction(callable, std::move(args), std::move(kwargs));
  case Kind::Module:
    return inlineModule(callable, std::move(args), std::move(kwargs));
  case Kind::Method: {
    const VariablePtr &self = callable->items.at(0);
    if (self->is(Kind::Object) && self->object.is(Handles::get().environment) &&
        callable->object) {
      std::string name =
          py::str(callable->object.attr("__name__")).cast<std::string>();
      auto none = Variable::constant(py::none());
      if (name == "get" && (args.size() == 1 || args.size() == 2))
        return readEnvironment(self, args[0],
                               args.size() == 2 ? &args[1] : &none);
      if (name == "__getitem__" && args.size() == 1)
        return readEnvironment(self, args[0], nullptr);
      unsupported("os.environ." + name);
    }
    if (self->is(Kind::Module) && callable->object &&
        callable->object.is(Handles::get().moduleCall))
      return inlineModule(self, std::move(args), std::move(kwargs),
                          /*viaModuleCall=*/true);
    if (self->is(Kind::Module) && callable->object)
      if (VariablePtr structure =
              moduleStructureCall(self, callable->object, args, kwargs))
        return structure;
    if (self->is(Kind::Instance) && callable->object &&
        !PyFunction_Check(callable->object.ptr())) {
      // OrderedDict's move_to_end(key, last=) and popitem(last=).
      if (kwargs.size() == 1 && kwargs[0].first == "last") {
        args.push_back(kwargs[0].second);
        kwargs.clear();
      }
      if (!kwargs.empty())
        unsupported("keyword arguments to a builtin method");
      return callSlotOnInstance(callable->object, self, args);
    }
    if ((!callable->object || callable->object.is_none()) &&
        self->is(Kind::Instance) && self->items.size() > 1) {
      // A builtin base's method of a dict subclass made in the frame acts
      // on its contents; copy() of an OrderedDict or defaultdict makes one
      // of its class. A deque's own methods first.
      const Handles &handles = Handles::get();
      if (self->object.is(handles.dequeType)) {
        if (!kwargs.empty())
          unsupported("keyword arguments to a deque method");
        if (VariablePtr result = callDequeMethod(self, callable->name, args))
          return result;
      }
      if (callable->name == "copy" &&
          (PyObject_IsSubclass(self->object.ptr(),
                               handles.orderedDictType.ptr()) == 1 ||
           PyObject_IsSubclass(self->object.ptr(),
                               handles.defaultDictType.ptr()) == 1)) {
        if (!args.empty() || !kwargs.empty())
          unsupported(kindNameOf(self->object) + ".copy with arguments");
        return copyBuiltinDict(self);
      }
      auto contents = Variable::make(Kind::Method);
      contents->name = callable->name;
      contents->items.push_back(self->items[1]);
      return call(contents, std::move(args), std::move(kwargs));
    }
    if (!callable->object || callable->object.is_none()) {
      if (self->is(Kind::Set)) {
        if (!kwargs.empty())
          unsupported("keyword arguments to a set method");
        return callMethodOfSet(self, callable->name, args);
      }
      if (self->kind == Kind::Tensor)
        return callTensorMethod(self, callable->name, args, kwargs);
      if (self->kind == Kind::Object && kwargs.empty())
        return readGuardedDict(self, callable->name, args);
      if (self->is(Kind::List) && callable->name == "sort" && args.empty()) {
        std::vector<VariablePtr> sorted = sortedItems(self->items, kwargs);
        checkNotInput(self, "sorting");
        self->items = std::move(sorted);
        return Variable::constant(py::none());
      }
      if (self->is(Kind::Dict) && callable->name == "update" &&
          args.size() <= 1) {
        // d.update(other, **more): other a dict or pairs, then keywords.
        checkNotInput(self, "updating");
        if (!args.empty())
          mergeIntoDict(self, args[0]);
        for (const auto &[name, value] : kwargs)
          setDictItem(self, py::str(name), value);
        return Variable::constant(py::none());
      }
      // An OrderedDict's contents (flag) take move_to_end(key, last=) and
      // popitem(last=); a plain dict has neither.
      bool ordered = self->is(Kind::Dict) && self->flag;
      if (ordered && kwargs.size() == 1 && kwargs[0].first == "last" &&
          (callable->name == "move_to_end" || callable->name == "popitem")) {
        args.push_back(kwargs[0].second);
        kwargs.clear();
      }
      if (!kwargs.empty())
        unsupported("keyword arguments to a container method");
      if (self->is(Kind::Dict) && !ordered &&
          (callable->name == "move_to_end" ||
           (callable->name == "popitem" && !args.empty())))
        unsupported("method " + callable->name + " of a dict");
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
  case Kind::GradContext: {
    // torch.no_grad() / enable_grad() as a decorator: a function that runs
    // the decorated one under the mode (kiln._polyfills.grad_mode_wrapper).
    if (args.size() != 1 || !kwargs.empty() || !callable->name.empty())
      unsupported("calling a grad-mode context with other than one function");
    auto model = Variable::make(Kind::Function);
    model->object = Handles::get().gradModeWrapper;
    return inlineFunction(
        model, {Variable::constant(py::bool_(callable->flag)), args[0]}, {});
  }
  case Kind::Callable:
  case Kind::Constant: {
    py::object function = callable->object;
    for (const py::object &falseFunction : h.alwaysFalse)
      if (function.is(falseFunction))
        return Variable::constant(py::bool_(false));
    for (const py::object &trueFunction : h.alwaysTrue)
      if (function.is(trueFunction))
        return Variable::constant(py::bool_(true));
    if (function.is(h.isGradEnabled))
      return Variable::constant(py::bool_(gradEnabled_));
    if (function.is(h.noGrad) || function.is(h.enableGrad)) {
      if (!args.empty() || !kwargs.empty())
        unsupported("torch.no_grad/enable_grad with arguments");
      auto context = Variable::make(Kind::GradContext);
      context->flag = function.is(h.enableGrad);
      return context;
    }
    if (function.is(h.setGradEnabled)) {
      // Sets the mode at once (a plain call, or a `with` block whose exit
      // restores the mode from before the call).
      std::optional<py::object> mode = args.size() == 1 && kwargs.empty()
                                           ? asConstant(args[0])
                                           : std::nullopt;
      if (!mode || !PyBool_Check(mode->ptr()))
        unsupported("torch.set_grad_enabled of anything but True or False");
      auto context = Variable::make(Kind::GradContext);
      context->flag = mode->is(py::bool_(true));
      context->name = "set_grad_enabled";
      context->position = gradEnabled_ ? 1 : 0; // the mode the exit restores
      setGradMode(context->flag);
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
    if (function.is(h.partialType)) {
      // functools.partial(func, *args, **kw) over objects that exist (not
      // tensors or functions the frame made): the real partial object, so
      // isinstance, type and its attributes are Python's; calls read it.
      py::list realArgs;
      py::dict realKwargs;
      auto real = [&](const VariablePtr &value) -> std::optional<py::object> {
        if (std::optional<py::object> constant = asConstant(value))
          return constant;
        if (value->object && !value->is(Kind::Tensor) &&
            (value->is(Kind::Function) || value->is(Kind::Callable) ||
             value->is(Kind::PythonModule) ||
             (value->is(Kind::Object) && !value->source)))
          return value->object;
        return std::nullopt;
      };
      bool allReal = true;
      for (const VariablePtr &arg : args)
        if (std::optional<py::object> value = real(arg))
          realArgs.append(*value);
        else
          allReal = false;
      for (const auto &[name, value] : kwargs)
        if (std::optional<py::object> item = real(value))
          realKwargs[py::str(name)] = *item;
        else
          allReal = false;
      if (!allReal) {
        // Over a tensor or a function the frame made: a closure that calls
        // func with the bound arguments first (kiln._polyfills.partial).
        auto model = Variable::make(Kind::Function);
        model->object = h.partialModel;
        return inlineFunction(model, std::move(args), std::move(kwargs));
      }
      py::object made = function(*realArgs, **realKwargs);
      keepAlive_.push_back(made);
      VariablePtr object = wrap(made, nullptr);
      object->ownedByFrame = true;
      return object;
    }
    if (function.is(h.tupleNew) && args.size() == 2 && kwargs.empty())
      if (std::optional<py::object> cls = asConstant(args[0]);
          cls && PyType_Check(cls->ptr()) &&
          PyType_IsSubtype(reinterpret_cast<PyTypeObject *>(cls->ptr()),
                           &PyTuple_Type)) {
        // tuple.__new__(cls, iterable): a namedtuple's _make. The items
        // are the fields; a class with its own __new__ or fields of its
        // own is not modelled.
        bool plain = cls->ptr() == reinterpret_cast<PyObject *>(&PyTuple_Type);
        if (!plain && !py::hasattr(*cls, "_fields"))
          unsupported("tuple.__new__ of " + kindNameOf(*cls));
        VariablePtr tuple = Variable::sequence(Kind::Tuple, unpack(args[1]));
        if (!plain)
          tuple->object = *cls;
        return tuple;
      }
    bool itemgetter = py::type::of(function).is(h.itemgetterType);
    if ((itemgetter || py::type::of(function).is(h.attrgetterType)) &&
        args.size() == 1 && kwargs.empty()) {
      // operator.itemgetter(*items)(obj) / attrgetter(*names)(obj): the
      // items or names from the getter, read by a Python model.
      py::tuple parts = py::tuple(function.attr("__reduce__")())[1];
      auto model = Variable::make(Kind::Function);
      model->object = itemgetter ? h.itemgetterCall : h.attrgetterCall;
      return inlineFunction(model, {Variable::constant(parts), args[0]}, {});
    }
    if (py::type::of(function).is(h.lruCacheWrapperType) &&
        PyFunction_Check(
            py::getattr(function, "__wrapped__", py::none()).ptr())) {
      // A functools.lru_cache'd function: its body, inlined (what it
      // computes from the same arguments is the same, cached or not).
      auto wrapped = Variable::make(Kind::Function);
      wrapped->object = function.attr("__wrapped__");
      return inlineFunction(wrapped, std::move(args), std::move(kwargs));
    }
    if (py::object model = h.polyfillFor(function)) {
      // functools.reduce, itertools' iterators, map, ...: their Python
      // model, inlined as user code is.
      auto inlined = Variable::make(Kind::Function);
      inlined->object = model;
      return inlineFunction(inlined, std::move(args), std::move(kwargs));
    }
    if (PyType_Check(function.ptr()) &&
        PyObject_IsSubclass(function.ptr(), h.recordFunctionType.ptr()) == 1) {
      // torch.profiler.record_function(name): a label for a profiler's
      // trace, which the compiled graph has no place for: a nullcontext.
      if (VariablePtr instance = constructInstance(h.nullContextType, {}, {}))
        return instance;
    }
    if (PyType_Check(function.ptr()) &&
        PyObject_IsSubclass(function.ptr(), h.autocastType.ptr()) == 1) {
      // torch.autocast(...), torch.cpu.amp.autocast(...): a frame runs
      // compiled only while autocast is off (CodeCache), so a block that
      // keeps it off changes nothing and a nullcontext stands in. One that
      // turns it on would change the dtypes of the calls in it.
      auto [constantArgs, constantKwargs] = constantArguments(
          args, kwargs, "torch.autocast with arguments that are not constants");
      if (h.autocastEnabled(function, py::tuple(constantArgs), constantKwargs)
              .cast<bool>())
        unsupported("torch.autocast turned on inside the compiled function");
      if (VariablePtr instance = constructInstance(h.nullContextType, {}, {}))
        return instance;
    }
    if (PyType_Check(function.ptr()))
      if (VariablePtr instance = constructInstance(function, args, kwargs))
        return instance;
    if (!args.empty() && args[0]->is(Kind::Instance) && kwargs.empty() &&
        !PyType_Check(function.ptr()) &&
        py::hasattr(function, "__objclass__")) {
      // object.__setattr__(self, ...), dict.__setitem__(self, ...)
      std::vector<VariablePtr> rest(args.begin() + 1, args.end());
      return callSlotOnInstance(function, args[0], rest);
    }
    if (function.is(h.builtin("__build_class__")))
      return defineClass(args, kwargs);
    if (function.is(h.builtin("super")) && args.empty())
      unsupported("super() needs the enclosing method");
    if (function.is(h.builtin("super")) && args.size() == 2 && kwargs.empty()) {
      // super(Cls, self): Cls a class, self what the method has.
      py::object cls = args[0]->object;
      if (!cls || !PyType_Check(cls.ptr()))
        unsupported("super() of something that is not a class");
      auto super = Variable::make(Kind::Super);
      super->object = cls;
      super->items.push_back(args[1]);
      return super;
    }
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
    bool returnsObject = h.pureObjectCalls.count(function.ptr()) > 0;
    // A method of an immutable constant ("-".join, "x".format, (1, 2).count)
    // reads it and nothing else.
    bool constantMethod = false;
    if (PyCFunction_Check(function.ptr())) {
      PyObject *self = PyCFunction_GET_SELF(function.ptr());
      constantMethod = self &&
                       (PyUnicode_CheckExact(self) ||
                        PyBytes_CheckExact(self) || PyTuple_CheckExact(self) ||
                        PyLong_CheckExact(self) || PyFloat_CheckExact(self)) &&
                       isConstantObject(self);
    }
    // An Enum class called with a value looks its member up.
    bool enumLookup =
        PyType_Check(function.ptr()) &&
        PyObject_IsSubclass(function.ptr(), h.enumType.ptr()) == 1;
    // An exception made to be raised (or compared): a builtin one, or a
    // user's class whose construction is the builtin base's (no Python
    // __init__ or __new__ of its own).
    bool exceptionClass = false;
    if (PyExceptionClass_Check(function.ptr())) {
      exceptionClass = true;
      if (reinterpret_cast<PyTypeObject *>(function.ptr())->tp_flags &
          Py_TPFLAGS_HEAPTYPE)
        for (const char *method : {"__init__", "__new__"}) {
          PyObject *found = lookUpOnType(function, method);
          if (!found || PyFunction_Check(found) ||
              Py_TYPE(found) == &PyStaticMethod_Type ||
              Py_TYPE(found) == &PyClassMethod_Type)
            exceptionClass = false;
        }
    }
    bool pure = callable->flag || h.pureBuiltins.count(function.ptr()) ||
                returnsObject || enumLookup || exceptionClass ||
                constantMethod || module == "math" || module == "operator" ||
                module == "_operator";
    if (pure) {
      py::list constantArgs;
      py::dict constantKwargs;
      bool allConstant = true;
      for (const VariablePtr &arg : args) {
        std::optional<py::object> constant = asConstant(arg);
        if (!constant && constantMethod && arg->is(Kind::Iterator)) {
          // "-".join(str(s) for s in shape): the generator's items.
          py::list items;
          for (const VariablePtr &item : unpack(arg)) {
            std::optional<py::object> value = asConstant(item);
            if (!value)
              unsupported("a string method over items that are not constants");
            items.append(*value);
          }
          constant = items;
        }
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
        // A size that varies is a torch.SymInt here: text made of it names
        // its symbol, and it is no int to isinstance or hash. Such calls
        // take the size's value, guarded (the size stops varying).
        bool sizes =
            holdsVaryingSize(constantArgs) || holdsVaryingSize(constantKwargs);
        static const char *const kValueCalls[] = {"str",   "repr", "format",
                                                  "ascii", "hash", "id"};
        auto specialize = [&]() {
          constantArgs = py::list(specializeSizes(constantArgs));
          constantKwargs = py::dict(specializeSizes(constantKwargs));
          sizes = false;
        };
        if (sizes)
          for (const char *name : kValueCalls)
            if (function.is(h.builtin(name)))
              specialize();
        py::object result;
        for (;;) {
          try {
            result = function(*py::tuple(constantArgs), **constantKwargs);
          } catch (py::error_already_set &error) {
            if (sizes) {
              specialize();
              continue;
            }
            raiseCaptured(error);
          }
          if (sizes && PyUnicode_Check(result.ptr())) {
            specialize(); // str.format, str.join, ... of a size
            continue;
          }
          break;
        }
        if (isConstantObject(result) ||
            (exceptionClass && PyExceptionInstance_Check(result.ptr())))
          return Variable::constant(result);
        if (PyList_CheckExact(result.ptr()) ||
            PyTuple_CheckExact(result.ptr()) || PyDict_CheckExact(result.ptr()))
          return wrap(result, nullptr);
        if (PySet_CheckExact(result.ptr())) {
          bool constants = true;
          for (py::handle element : result)
            constants &= isConstantObject(element);
          if (constants)
            return setFromObject(result);
        }
        if (returnsObject || py::type::of(result).is(h.itemgetterType) ||
            py::type::of(result).is(h.attrgetterType)) {
          // (operator's getters made of constants: their calls are
          // modelled, and the real object is what the frame holds)
          keepAlive_.push_back(result);
          VariablePtr object = wrap(result, nullptr);
          object->ownedByFrame = true; // made from constants by this call
          return object;
        }
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
    if (!PyType_Check(function.ptr()))
      if (VariablePtr method = pythonCallMethod(callable))
        return call(method, std::move(args), std::move(kwargs));
    unsupported("a call to " + py::repr(function).cast<std::string>());
  }
  case Kind::Instance:
  case Kind::Object:
    if (callable->is(Kind::Object) && callable->object &&
        Py_TYPE(callable->object.ptr()) ==
            reinterpret_cast<PyTypeObject *>(
                Handles::get().partialType.ptr())) {
      // partial(func, *args, **keywords)(*more, **kw): func(*args, *more,
      // **{**keywords, **kw}), each part read (and guarded) as it is used.
      std::vector<VariablePtr> all = unpack(loadAttr(callable, "args"));
      all.insert(all.end(), args.begin(), args.end());
      VariablePtr keywords = loadAttr(callable, "keywords");
      if (!keywords->is(Kind::Dict))
        unsupported("a partial whose keywords are not a dict");
      std::vector<std::pair<std::string, VariablePtr>> merged;
      for (size_t i = 0; i < keywords->keys.size(); ++i)
        merged.emplace_back(py::str(keywords->keys[i]).cast<std::string>(),
                            keywords->items[i]);
      for (auto &[name, value] : kwargs) {
        auto same =
            std::find_if(merged.begin(), merged.end(), [&](const auto &entry) {
              return entry.first == name;
            });
        if (same != merged.end())
          same->second = value;
        else
          merged.emplace_back(name, value);
      }
      return call(loadAttr(callable, "func"), std::move(all),
                  std::move(merged));
    }
    if (VariablePtr method = pythonCallMethod(callable))
      return call(method, std::move(args), std::move(kwargs));
    unsupported("calling a " + kindNameOf(pythonTypeOf(callable)));
  default:
    unsupported("calling a " + kindNameOf(pythonTypeOf(callable)));
  }
}

VariablePtr Evaluator::callPythonSpecialMethod(const VariablePtr &self,
                                               const char *name,
                                               std::vector<VariablePtr> args) {
  if ((!self->is(Kind::Object) && !self->is(Kind::Instance)) || !self->object)
    return nullptr;
  PyObject *method = lookUpOnType(
      self->is(Kind::Instance) ? self->object : py::type::of(self->object),
      name);
  if (!method || !PyFunction_Check(method))
    return nullptr;
  // The class is guarded (by type), so its method is this one.
  auto function = Variable::make(Kind::Function);
  function->object = py::reinterpret_borrow<py::object>(method);
  args.insert(args.begin(), self);
  return inlineFunction(function, std::move(args), {});
}

VariablePtr
Evaluator::inlineModule(const VariablePtr &module,
                        std::vector<VariablePtr> args,
                        std::vector<std::pair<std::string, VariablePtr>> kwargs,
                        bool viaModuleCall) {
  const Handles &h = Handles::get();
  py::object object = module->object;
  py::object type = py::type::of(object);
  if (!viaModuleCall && !py::object(type.attr("__call__")).is(h.moduleCall)) {
    // A module class's own __call__ (a checkpointing layer's): inlined; its
    // super().__call__ comes back here.
    py::object call = type.attr("__call__");
    if (!PyFunction_Check(call.ptr()))
      unsupported(typeName(object) + " overrides __call__");
    auto method = Variable::make(Kind::Method);
    method->object = call;
    method->items.push_back(module);
    return this->call(method, std::move(args), std::move(kwargs));
  }
  // The hooks as nn.Module.__call__ runs them (forward pre-hooks, forward,
  // forward hooks; global ones first), read through guarded dicts: a hook
  // registered or removed later misses the guards.
  SourcePtr globals = Source::fixed(h.nnModules, "torch.nn.modules.module");
  auto hooks = [&](const char *name, bool global) {
    return moduleHooks(global ? h.nnModules : object,
                       global ? globals : module->source, name);
  };
  for (const char *name : {"_backward_hooks", "_backward_pre_hooks"})
    if (!hooks(name, false).empty())
      unsupported("a module with backward hooks (" + typeName(object) + ")");
  for (const char *name :
       {"_global_backward_hooks", "_global_backward_pre_hooks"})
    if (!hooks(name, true).empty())
      unsupported("global backward hooks are registered");
  auto withKwargs = [&](const char *set, const py::object &id) {
    return py::hasattr(object, set) && object.attr(set).contains(id);
  };
  auto isNone = [](const VariablePtr &value) {
    return value->is(Kind::Constant) && value->object.is_none();
  };
  auto kwargsDict = [&]() {
    auto dict = Variable::make(Kind::Dict);
    for (const auto &[name, value] : kwargs) {
      dict->keys.push_back(py::str(name));
      dict->items.push_back(value);
    }
    return dict;
  };
  auto preHooks = hooks("_global_forward_pre_hooks", true);
  for (auto &hook : hooks("_forward_pre_hooks", false))
    preHooks.push_back(hook);
  for (const auto &[id, hook] : preHooks) {
    VariablePtr argsTuple = Variable::sequence(Kind::Tuple, args);
    if (withKwargs("_forward_pre_hooks_with_kwargs", id)) {
      VariablePtr result = call(hook, {module, argsTuple, kwargsDict()}, {});
      if (isNone(result))
        continue;
      if (!result->is(Kind::Tuple) || result->items.size() != 2 ||
          !result->items[1]->is(Kind::Dict))
        unsupported("a forward pre-hook with kwargs that returns neither None "
                    "nor (args, kwargs)");
      args = unpack(result->items[0]);
      kwargs.clear();
      const VariablePtr &dict = result->items[1];
      for (size_t i = 0; i < dict->keys.size(); ++i)
        kwargs.emplace_back(dict->keys[i].cast<std::string>(), dict->items[i]);
    } else {
      VariablePtr result = call(hook, {module, argsTuple}, {});
      if (isNone(result))
        continue;
      args = result->is(Kind::Tuple) ? result->items
                                     : std::vector<VariablePtr>{result};
    }
  }
  auto forward = Variable::make(Kind::Function);
  forward->object = type.attr("forward");
  if (!py::isinstance(forward->object, h.functionType))
    unsupported(typeName(object) + ".forward is not a Python function");
  std::vector<VariablePtr> forwardArgs = args;
  forwardArgs.insert(forwardArgs.begin(), module);
  std::vector<std::pair<std::string, VariablePtr>> forwardKwargs = kwargs;
  VariablePtr result =
      inlineFunction(forward, std::move(forwardArgs), std::move(forwardKwargs));
  auto postHooks = hooks("_global_forward_hooks", true);
  for (auto &hook : hooks("_forward_hooks", false))
    postHooks.push_back(hook);
  for (const auto &[id, hook] : postHooks) {
    VariablePtr argsTuple = Variable::sequence(Kind::Tuple, args);
    VariablePtr hookResult =
        withKwargs("_forward_hooks_with_kwargs", id)
            ? call(hook, {module, argsTuple, kwargsDict(), result}, {})
            : call(hook, {module, argsTuple, result}, {});
    if (!isNone(hookResult))
      result = hookResult;
  }
  return result;
}

std::vector<std::pair<py::object, VariablePtr>>
Evaluator::moduleHooks(py::handle owner, const SourcePtr &ownerSource,
                       const char *name) {
  std::vector<std::pair<py::object, VariablePtr>> hooks;
  if (!py::hasattr(owner, name))
    return hooks;
  py::object dict = owner.attr(name);
  py::tuple ids(py::list(dict.attr("keys")()));
  SourcePtr source = ownerSource ? Source::attr(ownerSource, name) : nullptr;
  if (source) {
    GuardCheck keys{GuardCheck::Kind::DictKeys, {}, {}};
    keys.expected = ids;
    guards_.addCheck(source, keys);
  }
  for (py::handle id : ids) {
    py::object key = py::reinterpret_borrow<py::object>(id);
    hooks.emplace_back(
        key, wrap(dict[key], source ? Source::item(source, key) : nullptr));
  }
  return hooks;
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
  // A nested function read from a source is guarded by its code (wrap):
  // what else it brings is read through that source.
  bool throughSource = readThroughSource(*function);
  Frame frame;
  if (function->object) {
    py::object fn = function->object;
    // Cython and other compiled functions carry a __code__ without
    // bytecode: they are C functions to kiln.
    if (!PyFunction_Check(fn.ptr()))
      unsupported("a call to " + py::repr(fn).cast<std::string>() +
                  " (compiled code, no Python bytecode)");
    code = fn.attr("__code__");
    globals = fn.attr("__globals__");
    defaults = fn.attr("__defaults__");
    kwdefaults = fn.attr("__kwdefaults__");
    SourcePtr fnSource =
        throughSource
            ? function->source
            : Source::fixed(
                  fn,
                  "F[" + std::to_string(reinterpret_cast<uintptr_t>(fn.ptr())) +
                      "]");
    if (!defaults.is_none()) {
      int i = 0;
      for (py::handle item : defaults)
        defaultVariables.push_back(
            wrap(item, Source::item(Source::attr(fnSource, "__defaults__"),
                                    py::int_(i++))));
    }
    py::object closure = fn.attr("__closure__");
    if (!closure.is_none()) {
      int i = 0;
      for (py::handle cell : closure) {
        auto cellVariable = Variable::make(Kind::Cell);
        cellVariable->object = py::reinterpret_borrow<py::object>(cell);
        SourcePtr cellSource =
            throughSource
                ? Source::item(Source::attr(fnSource, "__closure__"),
                               py::int_(i))
                : Source::fixed(cellVariable->object,
                                "Cell[" +
                                    std::to_string(reinterpret_cast<uintptr_t>(
                                        cell.ptr())) +
                                    "]");
        cellVariable->source = Source::attr(cellSource, "cell_contents");
        // Read through its function's source, the cell may be written
        // (nonlocal): a write to an outside object, replayed after the graph.
        if (throughSource)
          cellVariable->cells = {wrap(cell, cellSource)};
        frame.freeCells.push_back(cellVariable);
        ++i;
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
      frame.locals[i] =
          wrap(kwdefaults[name],
               throughSource
                   ? Source::item(
                         Source::attr(function->source, "__kwdefaults__"), name)
                   : nullptr);
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

} // namespace kiln::frontend::evaluation

namespace kiln::frontend::evaluation {

VariablePtr Evaluator::moduleStructureCall(
    const VariablePtr &module, py::handle function,
    const std::vector<VariablePtr> &args,
    const std::vector<std::pair<std::string, VariablePtr>> &kwargs) {
  // The named form of each method, which says where each item lives.
  static const std::pair<const char *, const char *> kMethods[] = {
      {"parameters", "named_parameters"},
      {"named_parameters", "named_parameters"},
      {"buffers", "named_buffers"},
      {"named_buffers", "named_buffers"},
      {"children", "named_children"},
      {"named_children", "named_children"},
      {"modules", "named_modules"},
      {"named_modules", "named_modules"}};
  const Handles &h = Handles::get();
  const char *method = nullptr, *named = nullptr;
  for (const auto &[name, namedForm] : kMethods)
    if (function.is(h.moduleBase.attr(name)))
      method = name, named = namedForm;
  if (!method || !module->source || !module->object)
    return nullptr;
  auto [constantArgs, constantKwargs] =
      constantArguments(args, kwargs,
                        std::string("module.") + method +
                            "() with an argument that is not a "
                            "constant");
  if (std::string(method) != named && py::len(constantArgs) > 0) {
    // parameters(recurse) and buffers(recurse): the named forms take the
    // prefix first.
    if (py::len(constantArgs) > 1 || std::string(method) == "children" ||
        std::string(method) == "modules")
      unsupported(std::string("module.") + method + "() with these arguments");
    constantKwargs["recurse"] = constantArgs[0];
    constantArgs = py::list();
  }
  // The structure every call of these methods walks: each module's
  // parameters, buffers and submodules, by name.
  std::function<void(py::handle, const SourcePtr &)> guardTree =
      [&](py::handle object, const SourcePtr &source) {
        for (const char *table : {"_parameters", "_buffers", "_modules"}) {
          py::object dict = py::getattr(object, table, py::none());
          if (!PyDict_Check(dict.ptr()))
            unsupported("a module whose " + std::string(table) +
                        " is not a dict");
          GuardCheck keys{GuardCheck::Kind::DictKeys, {}, {}};
          keys.expected = py::tuple(py::list(dict.attr("keys")()));
          guards_.addCheck(Source::attr(source, table), keys);
        }
        for (auto entry : py::dict(object.attr("_modules")))
          if (!entry.second.is_none())
            guardTree(entry.second, Source::attr(source, py::str(entry.first)));
      };
  guardTree(module->object, module->source);
  py::object items;
  try {
    items = py::list(
        module->object.attr(named)(*py::tuple(constantArgs), **constantKwargs));
  } catch (py::error_already_set &error) {
    unsupported(std::string("module.") + method + "() raised during capture");
  }
  std::string prefix;
  if (py::object given = constantKwargs.attr("get")("prefix", py::none());
      !given.is_none())
    prefix = py::str(given).cast<std::string>();
  else if (std::string(named) == "named_modules" && constantArgs.size() >= 2)
    prefix = py::str(constantArgs[1]).cast<std::string>();
  else if (std::string(named) != "named_children" && !constantArgs.empty() &&
           PyUnicode_Check(constantArgs[0].ptr()))
    prefix = py::str(constantArgs[0]).cast<std::string>();
  auto iterator = Variable::make(Kind::Iterator);
  bool withNames = std::string(method) == named;
  for (py::handle entry : items) {
    py::tuple pair = py::reinterpret_borrow<py::tuple>(entry);
    std::string path = py::str(pair[0]).cast<std::string>();
    if (!prefix.empty() && path.compare(0, prefix.size(), prefix) == 0)
      path = path.substr(std::min(path.size(), prefix.size() + 1));
    SourcePtr source = module->source;
    size_t start = 0;
    while (start < path.size()) {
      size_t dot = path.find('.', start);
      source = Source::attr(source, path.substr(start, dot - start));
      if (dot == std::string::npos)
        break;
      start = dot + 1;
    }
    VariablePtr item = wrap(py::tuple(pair)[1], source);
    iterator->items.push_back(
        withNames
            ? Variable::sequence(Kind::Tuple,
                                 {Variable::constant(py::tuple(pair)[0]), item})
            : item);
  }
  return iterator;
}

} // namespace kiln::frontend::evaluation
