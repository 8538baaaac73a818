// Objects the captured code builds: instances of Python classes (plain
// classes, dataclasses, dict subclasses such as transformers' ModelOutput)
// and sets. Construction inlines __init__; attributes live in a modelled
// __dict__; the class's Python methods, properties, __setattr__ and
// special methods run through the evaluator, and its builtin base's slots
// (object.__setattr__, dict.__setitem__) act on the model. An instance that
// outlives the graph is rebuilt after it from its class and state.
// Depends on frontend/Evaluator.h, pybind11, CPython.
#include "bridge/PythonConversion.h"
#include "frontend/EvalFrameHook.h"
#include "frontend/Evaluator.h"

#include <algorithm>

namespace kiln::frontend::evaluation {

namespace {

/// The builtin class whose storage an instance of `cls` has (object, dict
/// or OrderedDict), or null where another builtin or extension base, a
/// Python __new__ or a metaclass with its own __call__ makes the instance
/// something kiln does not model.
PyObject *modelledBase(py::handle cls) {
  const Handles &h = Handles::get();
  PyObject *objectType = reinterpret_cast<PyObject *>(&PyBaseObject_Type);
  PyObject *dictType = reinterpret_cast<PyObject *>(&PyDict_Type);
  py::handle ordered = h.orderedDictType;
  py::handle defaulted = h.defaultDictType;
  PyObject *base = objectType;
  for (py::handle entry : cls.attr("__mro__")) {
    PyObject *type = entry.ptr();
    if (type == objectType)
      continue;
    if (type == dictType) {
      if (base == objectType)
        base = dictType;
      continue;
    }
    if (type == ordered.ptr() || type == defaulted.ptr()) {
      base = type;
      continue;
    }
    if (!(reinterpret_cast<PyTypeObject *>(type)->tp_flags &
          Py_TPFLAGS_HEAPTYPE))
      return nullptr;
  }
  if (lookUpOnType(cls, "__new__") != lookUpOnType(base, "__new__"))
    return nullptr;
  py::handle metaclass = py::type::of(cls);
  if (lookUpOnType(metaclass, "__call__") !=
      lookUpOnType(reinterpret_cast<PyObject *>(&PyType_Type), "__call__"))
    return nullptr;
  if (PyObject_IsSubclass(cls.ptr(), h.moduleBase.ptr()) == 1)
    return nullptr; // nn.Module's own state is more than a __dict__
  py::object abstract = py::getattr(cls, "__abstractmethods__", py::none());
  if (!abstract.is_none() && py::len(abstract) > 0)
    return nullptr;
  return base;
}

VariablePtr functionVariable(PyObject *function) {
  auto variable = Variable::make(Kind::Function);
  variable->object = py::reinterpret_borrow<py::object>(function);
  return variable;
}

} // namespace

const VariablePtr &dequeMaxlen(const VariablePtr &deque) {
  const VariablePtr &attributes = deque->items[0];
  int index = findKey(attributes, py::str("maxlen"));
  if (index < 0) // its __dict__ model was changed
    throw Unsupported("a deque whose maxlen the frame removed");
  return attributes->items[index];
}

int findKey(const VariablePtr &dict, py::handle key) {
  for (size_t i = 0; i < dict->keys.size(); ++i)
    if (dict->keys[i].equal(key))
      return static_cast<int>(i);
  return -1;
}

VariablePtr Evaluator::defineClass(
    const std::vector<VariablePtr> &args,
    const std::vector<std::pair<std::string, VariablePtr>> &kwargs) {
  // A class statement makes a new class each time it runs; the capture
  // makes one and its calls share it. The class cannot change under them:
  // its attributes are never written (storeAttr refuses a class), and the
  // function's locals it closes over must be constants (the class itself,
  // named in its methods), so the body's only inputs are its code, those
  // constants and the globals it reads, which are guarded as the frame's
  // own global reads are.
  if (!kwargs.empty())
    unsupported("a class statement with keywords (a metaclass)");
  if (args.size() < 2 || !args[0]->is(Kind::Function) || args[0]->object)
    unsupported("__build_class__ called outside a class statement");
  const VariablePtr &body = args[0];
  // The body's closure: a cell of an enclosing function is real already;
  // one the frame made (its methods name the class, or a constant of the
  // frame) gets a real cell kept equal to it (STORE_DEREF).
  py::tuple closure(body->cells.size());
  for (size_t i = 0; i < body->cells.size(); ++i) {
    const VariablePtr &cell = body->cells[i];
    if (!cell->is(Kind::Cell))
      unsupported("a class statement with a closure of a " +
                  kindNameOf(pythonTypeOf(cell)));
    if (cell->object) {
      closure[i] = cell->object;
      continue;
    }
    if (!cell->realCell) {
      cell->realCell = py::reinterpret_steal<py::object>(PyCell_New(nullptr));
      if (!cell->items.empty()) {
        std::optional<py::object> constant = asConstant(cell->items[0]);
        if (!constant)
          unsupported("a class statement whose body or methods read a " +
                      kindNameOf(pythonTypeOf(cell->items[0])) +
                      " of the function (a closure)");
        PyCell_Set(cell->realCell.ptr(), constant->ptr());
      }
    }
    closure[i] = cell->realCell;
  }
  std::optional<py::object> name = asConstant(args[1]);
  if (!name || !PyUnicode_Check(name->ptr()))
    unsupported("a class statement without a constant name");
  py::list bases;
  for (size_t i = 2; i < args.size(); ++i) {
    std::optional<py::object> base = asConstant(args[i]);
    if (!base || !PyType_Check(base->ptr()))
      unsupported("a class statement whose bases are not classes");
    bases.append(*base);
  }
  py::dict globals = py::reinterpret_borrow<py::dict>(body->globals);
  for (py::handle item : body->code.attr("co_names")) {
    py::str key = py::reinterpret_borrow<py::str>(item);
    if (PyDict_Contains(globals.ptr(), key.ptr()) != 1 ||
        python::isTensor(globals[key]))
      continue;
    wrap(globals[key], globalSource(globals, key.cast<std::string>()));
  }
  py::object cls;
  {
    HookSuspension suspension; // the body's frames run as they are
    try {
      py::object function = py::module_::import("types").attr("FunctionType")(
          body->code, globals, *name, py::none(),
          body->cells.empty() ? py::object(py::none()) : py::object(closure));
      cls = Handles::get().builtin("__build_class__")(function, *name,
                                                      *py::tuple(bases));
    } catch (py::error_already_set &error) {
      unsupported("the body of class " + name->cast<std::string>() +
                  " raised " + error.what());
    }
  }
  return wrap(cls, nullptr);
}

VariablePtr Evaluator::newInstance(py::handle cls,
                                   std::optional<Kind> contents) {
  auto instance = Variable::make(Kind::Instance);
  instance->object = py::reinterpret_borrow<py::object>(cls);
  instance->items.push_back(Variable::make(Kind::Dict));
  if (contents)
    instance->items.push_back(Variable::make(*contents));
  madeInstances_ = true;
  return instance;
}

VariablePtr Evaluator::constructInstance(
    py::handle cls, std::vector<VariablePtr> args,
    std::vector<std::pair<std::string, VariablePtr>> kwargs) {
  const Handles &h = Handles::get();
  if (cls.is(h.orderedDictType) || cls.is(h.defaultDictType))
    return constructBuiltinDict(cls, args, kwargs);
  if (cls.is(h.dequeType))
    return constructDeque(args, kwargs);
  if (cls.is(h.simpleNamespaceType)) {
    // types.SimpleNamespace(**attributes): an object with those attributes
    // (a mapping passed positionally is Python 3.13's).
    if (!args.empty())
      unsupported("types.SimpleNamespace() with a positional argument");
    VariablePtr instance = newInstance(cls);
    for (const auto &[name, value] : kwargs)
      setDictItem(instance->items[0], py::str(name), value);
    return instance;
  }
  if (!(reinterpret_cast<PyTypeObject *>(cls.ptr())->tp_flags &
        Py_TPFLAGS_HEAPTYPE))
    return nullptr; // a builtin or extension class itself
  if (VariablePtr tuple = constructNamedTuple(cls, args, kwargs))
    return tuple;
  if (VariablePtr module = constructStatelessModule(cls, args, kwargs))
    return module;
  PyObject *base = modelledBase(cls);
  if (!base)
    return nullptr;
  VariablePtr instance =
      newInstance(cls, base != reinterpret_cast<PyObject *>(&PyBaseObject_Type)
                           ? std::optional<Kind>(Kind::Dict)
                           : std::nullopt);
  if (base == h.orderedDictType.ptr())
    instance->items[1]->flag = true; // OrderedDict's methods
  PyObject *init = lookUpOnType(cls, "__init__");
  if (init && PyFunction_Check(init)) {
    args.insert(args.begin(), instance);
    VariablePtr result =
        inlineFunction(functionVariable(init), std::move(args), kwargs);
    if (!result->is(Kind::Constant) || !result->object.is_none())
      unsupported("__init__ of " + kindNameOf(cls) + " returned a value");
  } else if (!args.empty() || !kwargs.empty()) {
    unsupported(kindNameOf(cls) + "() with arguments and no Python __init__");
  }
  return instance;
}

VariablePtr Evaluator::constructDeque(
    std::vector<VariablePtr> &args,
    const std::vector<std::pair<std::string, VariablePtr>> &kwargs) {
  VariablePtr iterable, maxlen = Variable::constant(py::none());
  if (args.size() > 2)
    unsupported("deque() with more than two arguments");
  if (!args.empty())
    iterable = args[0];
  if (args.size() == 2)
    maxlen = args[1];
  for (const auto &[name, value] : kwargs) {
    if (name == "iterable" && !iterable)
      iterable = value;
    else if (name == "maxlen" && args.size() < 2)
      maxlen = value;
    else
      unsupported("deque() with the keyword " + name);
  }
  std::optional<py::object> bound = asConstant(maxlen);
  if (!bound || (!bound->is_none() && !PyLong_CheckExact(bound->ptr())))
    unsupported("a deque whose maxlen is not a constant int");
  if (!bound->is_none() && bound->cast<int64_t>() < 0)
    raisePython(PyExc_ValueError, py::str("maxlen must be non-negative"));
  VariablePtr instance = newInstance(Handles::get().dequeType, Kind::List);
  setDictItem(instance->items[0], py::str("maxlen"),
              Variable::constant(*bound));
  if (iterable) {
    std::vector<VariablePtr> extend = {iterable};
    callDequeMethod(instance, "extend", extend);
  }
  return instance;
}

VariablePtr Evaluator::callDequeMethod(const VariablePtr &deque,
                                       const std::string &name,
                                       std::vector<VariablePtr> &args) {
  std::vector<VariablePtr> &items = deque->items[1]->items;
  py::handle bound = dequeMaxlen(deque)->object;
  int64_t maxlen = bound.is_none() ? -1 : bound.cast<int64_t>();
  auto none = Variable::constant(py::none());
  // Python's deque drops from the other end once it holds maxlen items.
  auto add = [&](const VariablePtr &item, bool left) {
    if (maxlen == 0)
      return;
    if (maxlen > 0 && int64_t(items.size()) == maxlen) {
      if (left)
        items.pop_back();
      else
        items.erase(items.begin());
    }
    items.insert(left ? items.begin() : items.end(), item);
  };
  if ((name == "append" || name == "appendleft") && args.size() == 1) {
    add(args[0], name == "appendleft");
    return none;
  }
  if ((name == "extend" || name == "extendleft") && args.size() == 1) {
    // d.extend(d) takes the items as they were.
    for (const VariablePtr &item : unpack(args[0]))
      add(item, name == "extendleft");
    return none;
  }
  if (name == "popleft" && args.empty()) {
    if (items.empty())
      raisePython(PyExc_IndexError, py::str("pop from an empty deque"));
    VariablePtr first = items.front();
    items.erase(items.begin());
    return first;
  }
  if (name == "pop" && args.empty()) {
    if (items.empty())
      raisePython(PyExc_IndexError, py::str("pop from an empty deque"));
    VariablePtr last = items.back();
    items.pop_back();
    return last;
  }
  if (name == "rotate" && args.size() <= 1) {
    std::optional<py::object> steps =
        args.empty() ? std::optional<py::object>(py::int_(1))
                     : asConstant(args[0]);
    if (!steps || !PyLong_CheckExact(steps->ptr()))
      unsupported("deque.rotate by a count that is not a constant int");
    if (items.empty())
      return none;
    int64_t size = static_cast<int64_t>(items.size());
    int64_t shift = ((steps->cast<int64_t>() % size) + size) % size;
    std::rotate(items.begin(), items.end() - shift, items.end());
    return none;
  }
  if (name == "insert" && maxlen >= 0 && int64_t(items.size()) >= maxlen)
    raisePython(PyExc_IndexError, py::str("deque already at its maximum size"));
  if (name == "pop" || name == "sort" || name == "copy" || name == "__copy__" ||
      name == "__reduce__")
    unsupported("deque." + name);
  return nullptr; // a list's method acts on the contents as it is
}

VariablePtr Evaluator::constructBuiltinDict(
    py::handle cls, std::vector<VariablePtr> &args,
    const std::vector<std::pair<std::string, VariablePtr>> &kwargs) {
  // OrderedDict(items, **more) and defaultdict(factory, items, **more): an
  // instance whose contents are a dict of the frame; defaultdict's factory
  // is its default_factory attribute (a missing key calls it).
  VariablePtr instance = newInstance(cls, Kind::Dict);
  instance->items[1]->flag = cls.is(Handles::get().orderedDictType);
  size_t first = 0;
  if (cls.is(Handles::get().defaultDictType)) {
    VariablePtr factory =
        args.empty() ? Variable::constant(py::none()) : args[0];
    if (!(factory->is(Kind::Constant) && factory->object.is_none()) &&
        !factory->is(Kind::Function) && !factory->is(Kind::Callable) &&
        !factory->is(Kind::Constant))
      unsupported("a defaultdict whose factory is a " +
                  kindNameOf(pythonTypeOf(factory)));
    setDictItem(instance->items[0], py::str("default_factory"), factory);
    first = args.empty() ? 0 : 1;
  }
  if (args.size() > first + 1)
    unsupported(kindNameOf(cls) + "() with more than one mapping");
  if (args.size() == first + 1)
    mergeIntoDict(instance->items[1], args[first]);
  for (const auto &[name, value] : kwargs)
    setDictItem(instance->items[1], py::str(name), value);
  return instance;
}

VariablePtr Evaluator::copyBuiltinDict(const VariablePtr &self) {
  // OrderedDict.copy() and defaultdict.copy(): one of the same class with
  // the contents (and the default_factory), as CPython's copy makes them. A
  // subclass's copy calls its own constructor: not modelled.
  const Handles &handles = Handles::get();
  bool defaults = self->object.is(handles.defaultDictType);
  if (!defaults && !self->object.is(handles.orderedDictType))
    unsupported(kindNameOf(self->object) +
                ".copy (an object of its own class)");
  std::vector<VariablePtr> args;
  if (defaults) {
    int slot = findKey(self->items[0], py::str("default_factory"));
    args.push_back(slot < 0 ? Variable::constant(py::none())
                            : self->items[0]->items[static_cast<size_t>(slot)]);
  }
  args.push_back(self->items[1]);
  return constructBuiltinDict(self->object, args, {});
}

VariablePtr Evaluator::missingItem(const VariablePtr &instance,
                                   const VariablePtr &key) {
  // d[key] of a dict subclass made in the frame, the key not there: its
  // __missing__ (a Python one inlined; defaultdict's calls the factory and
  // stores what it made).
  PyObject *missing = lookUpOnType(instance->object, "__missing__");
  if (!missing)
    return nullptr;
  if (PyFunction_Check(missing))
    return inlineFunction(functionVariable(missing), {instance, key}, {});
  if (PyObject_IsSubclass(instance->object.ptr(),
                          Handles::get().defaultDictType.ptr()) != 1)
    unsupported("a builtin __missing__ of " + kindNameOf(instance->object));
  int slot = findKey(instance->items[0], py::str("default_factory"));
  VariablePtr factory =
      slot < 0 ? nullptr : instance->items[0]->items[static_cast<size_t>(slot)];
  std::optional<py::object> constantKey = asConstant(key);
  if (!constantKey)
    unsupported("a dict key that is not a constant");
  if (!factory || (factory->is(Kind::Constant) && factory->object.is_none()))
    raisePython(PyExc_KeyError, *constantKey);
  VariablePtr made = call(factory, {}, {});
  setDictItem(instance->items[1], *constantKey, made);
  return made;
}

VariablePtr Evaluator::constructNamedTuple(
    py::handle cls, const std::vector<VariablePtr> &args,
    const std::vector<std::pair<std::string, VariablePtr>> &kwargs) {
  // collections.namedtuple and typing.NamedTuple classes whose __new__ is
  // the generated one: the fields bound as that __new__ binds them.
  if (!PyType_IsSubtype(reinterpret_cast<PyTypeObject *>(cls.ptr()),
                        &PyTuple_Type) ||
      !py::hasattr(cls, "_fields") || !py::hasattr(cls, "_field_defaults"))
    return nullptr;
  // namedtuple compiles __new__ with eval() in a namespace it names
  // "namedtuple_<typename>".
  py::object generated = py::getattr(cls, "__new__");
  if (!PyFunction_Check(generated.ptr()))
    return nullptr;
  PyObject *space = PyFunction_GET_GLOBALS(generated.ptr());
  PyObject *spaceName = PyDict_GetItemString(space, "__name__");
  if (!spaceName || !PyUnicode_Check(spaceName) ||
      PyUnicode_Tailmatch(spaceName, py::str("namedtuple_").ptr(), 0, 11, -1) !=
          1)
    return nullptr;
  py::tuple fields = cls.attr("_fields");
  py::dict defaults = cls.attr("_field_defaults");
  size_t count = fields.size();
  if (args.size() > count)
    unsupported(kindNameOf(cls) + "() with too many arguments");
  std::vector<VariablePtr> items(count);
  for (size_t i = 0; i < args.size(); ++i)
    items[i] = args[i];
  for (const auto &[name, value] : kwargs) {
    size_t i = 0;
    while (i < count && fields[i].cast<std::string>() != name)
      ++i;
    if (i == count || items[i])
      unsupported(kindNameOf(cls) + "() with an unexpected argument " + name);
    items[i] = value;
  }
  for (size_t i = 0; i < count; ++i) {
    if (items[i])
      continue;
    if (!defaults.contains(fields[i]))
      unsupported(kindNameOf(cls) + "() missing an argument");
    items[i] = Variable::constant(defaults[fields[i]]);
  }
  VariablePtr tuple = Variable::sequence(Kind::Tuple, std::move(items));
  tuple->object = py::reinterpret_borrow<py::object>(cls);
  return tuple;
}

VariablePtr Evaluator::constructStatelessModule(
    py::handle cls, const std::vector<VariablePtr> &args,
    const std::vector<std::pair<std::string, VariablePtr>> &kwargs) {
  // nn.Softmax(dim=-1) built inside forward: made now from constant
  // arguments, it is a constant module of the graph. One that owns
  // parameters or buffers (initialised at random, or from a tensor) is
  // not: it is refused.
  const Handles &h = Handles::get();
  if (!PyType_IsSubtype(reinterpret_cast<PyTypeObject *>(cls.ptr()),
                        reinterpret_cast<PyTypeObject *>(h.moduleBase.ptr())))
    return nullptr;
  if (!isTorchModuleName(moduleOf(cls)))
    unsupported("constructing " + kindNameOf(cls) +
                " (an nn.Module of the user's) inside the frame");
  py::list constantArgs;
  py::dict constantKwargs;
  for (const VariablePtr &arg : args) {
    std::optional<py::object> constant = asConstant(arg);
    if (!constant || arg->is(Kind::Module))
      unsupported("constructing " + kindNameOf(cls) +
                  " from values that are not constants");
    constantArgs.append(specializeSizes(*constant));
  }
  for (const auto &[name, value] : kwargs) {
    std::optional<py::object> constant = asConstant(value);
    if (!constant || value->is(Kind::Module))
      unsupported("constructing " + kindNameOf(cls) +
                  " from values that are not constants");
    constantKwargs[py::str(name)] = specializeSizes(*constant);
  }
  // Its __init__ is torch's Python code, which CPython runs (the hook is
  // suspended during capture).
  py::object module = cls(*py::tuple(constantArgs), **constantKwargs);
  if (py::len(py::list(module.attr("parameters")())) ||
      py::len(py::list(module.attr("buffers")())))
    unsupported("constructing " + kindNameOf(cls) +
                ", which owns parameters or buffers, inside the frame");
  keepAlive_.push_back(module);
  VariablePtr result = Variable::make(Kind::Module);
  result->object = module;
  result->ownedByFrame = true;
  return result;
}

VariablePtr Evaluator::instanceAttribute(const VariablePtr &self,
                                         const std::string &name,
                                         bool orGetattrHook) {
  py::handle cls = self->object;
  std::string where = "attribute '" + name + "' of " + kindNameOf(cls);
  if (!hasGenericAttributes(cls, false))
    unsupported(where + ", whose class overrides __getattribute__");
  if (name == "__class__")
    return wrap(cls, nullptr);
  if (name == "__dict__")
    return self->items[0];
  if (cls.is(Handles::get().dequeType) && name == "maxlen")
    return dequeMaxlen(self);
  PyObject *classAttribute = lookUpOnType(cls, name);
  if (classAttribute && Py_TYPE(classAttribute)->tp_descr_set &&
      Py_TYPE(classAttribute) != &PyMemberDescr_Type) {
    if (Py_TYPE(classAttribute) == &PyProperty_Type) {
      py::object getter = py::handle(classAttribute).attr("fget");
      if (PyFunction_Check(getter.ptr()))
        return inlineFunction(functionVariable(getter.ptr()), {self}, {});
    }
    unsupported(where + " through a " + typeName(classAttribute));
  }
  int index = findKey(self->items[0], py::str(name));
  if (index >= 0)
    return self->items[0]->items[index];
  if (classAttribute) {
    py::handle attribute(classAttribute);
    if (PyFunction_Check(classAttribute)) {
      auto method = Variable::make(Kind::Method);
      method->object = py::reinterpret_borrow<py::object>(attribute);
      method->items.push_back(self);
      return method;
    }
    if (Py_TYPE(classAttribute) == &PyClassMethod_Type) {
      auto method = Variable::make(Kind::Method);
      method->object = attribute.attr("__func__");
      method->items.push_back(wrap(cls, nullptr));
      return method;
    }
    if (Py_TYPE(classAttribute) == &PyStaticMethod_Type)
      return wrap(attribute.attr("__func__"), nullptr);
    if (Py_TYPE(classAttribute)->tp_descr_get) {
      // A builtin base's method (OrderedDict.keys, dict.get): it acts on
      // the modelled contents.
      py::object owner = py::getattr(attribute, "__objclass__", py::none());
      if (self->items.size() > 1 && !owner.is_none() &&
          owner.ptr() != reinterpret_cast<PyObject *>(&PyBaseObject_Type)) {
        // Bound to the instance (a graph break rebuilds it as its own
        // class's method); calls act on the contents.
        auto method = Variable::make(Kind::Method);
        method->name = name;
        method->items.push_back(self);
        return method;
      }
      unsupported(where + " through a " + typeName(classAttribute));
    }
    return wrap(attribute, nullptr);
  }
  PyObject *hook = lookUpOnType(cls, "__getattr__");
  if (orGetattrHook && hook && PyFunction_Check(hook))
    return inlineFunction(functionVariable(hook),
                          {self, Variable::constant(py::str(name))}, {});
  raisePython(PyExc_AttributeError,
              py::str("'" + kindNameOf(cls) + "' object has no " + where));
}

bool Evaluator::instanceHasAttribute(const VariablePtr &self,
                                     const std::string &name) {
  py::handle cls = self->object;
  // Objects of a class with __slots__ only have no __dict__.
  if (name == "__dict__")
    return reinterpret_cast<PyTypeObject *>(cls.ptr())->tp_dictoffset != 0;
  if (name == "__class__" || findKey(self->items[0], py::str(name)) >= 0)
    return true;
  if (PyObject *attribute = lookUpOnType(cls, name)) {
    if (Py_TYPE(attribute) != &PyMemberDescr_Type)
      return true; // a slot is there once it has been set
  }
  if (PyObject *hook = lookUpOnType(cls, "__getattr__")) {
    if (!PyFunction_Check(hook))
      unsupported("hasattr on a " + kindNameOf(cls) +
                  " with a builtin "
                  "__getattr__");
    // As CPython's hasattr: __getattr__ runs, and an AttributeError from it
    // means no.
    try {
      inlineFunction(functionVariable(hook),
                     {self, Variable::constant(py::str(name))}, {});
    } catch (PythonException &raised) {
      if (!py::isinstance(raised.exception, py::handle(PyExc_AttributeError)))
        throw;
      return false;
    }
    return true;
  }
  return false;
}

void Evaluator::storeInstanceAttribute(const VariablePtr &self,
                                       const std::string &name,
                                       const VariablePtr &value) {
  PyObject *setter = lookUpOnType(self->object, "__setattr__");
  if (setter && PyFunction_Check(setter)) {
    inlineFunction(functionVariable(setter),
                   {self, Variable::constant(py::str(name)), value}, {});
    return;
  }
  if (!hasGenericAttributes(self->object, true))
    unsupported("setting attribute '" + name + "' of a " +
                kindNameOf(self->object) + " whose __setattr__ is builtin");
  setRawAttribute(self, name, value);
}

void Evaluator::setRawAttribute(const VariablePtr &self,
                                const std::string &name,
                                const VariablePtr &value) {
  PyObject *classAttribute = lookUpOnType(self->object, name);
  if (classAttribute && Py_TYPE(classAttribute)->tp_descr_set &&
      Py_TYPE(classAttribute) != &PyMemberDescr_Type) {
    if (Py_TYPE(classAttribute) == &PyProperty_Type) {
      py::object setter = py::handle(classAttribute).attr("fset");
      if (PyFunction_Check(setter.ptr())) {
        inlineFunction(functionVariable(setter.ptr()), {self, value}, {});
        return;
      }
    }
    unsupported("setting attribute '" + name + "' through a " +
                typeName(classAttribute));
  }
  const VariablePtr &attributes = self->items[0];
  py::str key(name);
  int index = findKey(attributes, key);
  if (index >= 0) {
    attributes->items[index] = value;
    return;
  }
  attributes->keys.push_back(key);
  attributes->items.push_back(value);
}

VariablePtr Evaluator::superAttribute(const VariablePtr &super,
                                      const std::string &name) {
  // Looked up on the class as Python's super does, and bound to the
  // variable `self`, never to the object the capture saw: a later call's
  // self is another object.
  const VariablePtr &self = super->items.at(0);
  py::object type =
      self->is(Kind::Instance) ? self->object : py::type::of(self->object);
  py::tuple mro = type.attr("__mro__");
  size_t start = 0;
  while (start < mro.size() && mro[start].ptr() != super->object.ptr())
    ++start;
  for (size_t i = start + 1; i < mro.size(); ++i) {
    py::dict members = mro[i].attr("__dict__");
    if (!members.contains(name.c_str()))
      continue;
    py::object attribute = members[name.c_str()];
    PyTypeObject *kind = Py_TYPE(attribute.ptr());
    auto method = Variable::make(Kind::Method);
    method->items.push_back(self);
    if (kind == &PyMethodDescr_Type && self->is(Kind::Object)) {
      // dict's own reads (get, keys, …) on a dict subclass from outside:
      // guarded reads of its entries.
      py::object bound = attribute.attr("__get__")(self->object);
      if (VariablePtr read = dictReadMethod(self, name, bound))
        return read;
    }
    if (PyFunction_Check(attribute.ptr()) || kind == &PyMethodDescr_Type ||
        kind == &PyWrapperDescr_Type) {
      method->object = attribute; // a Python method, or a builtin slot
      return method;
    }
    if (kind == &PyClassMethod_Type) {
      method->object = attribute.attr("__func__");
      method->items[0] = wrap(type, nullptr);
      return method;
    }
    if (kind == &PyStaticMethod_Type)
      return wrap(attribute.attr("__func__"), nullptr);
    if (!kind->tp_descr_get)
      return wrap(attribute, nullptr);
    unsupported("super()." + name + " through a " + typeName(attribute));
  }
  unsupported("super() has no attribute '" + name + "'");
}

VariablePtr Evaluator::callSlotOnInstance(py::handle slot,
                                          const VariablePtr &self,
                                          std::vector<VariablePtr> &args) {
  std::string name = py::str(slot.attr("__name__")).cast<std::string>();
  py::object owner = py::getattr(slot, "__objclass__", py::none());
  auto none = Variable::constant(py::none());
  auto nameArgument = [&]() {
    std::optional<py::object> constant =
        args.empty() ? std::nullopt : asConstant(args[0]);
    if (!constant || !PyUnicode_Check(constant->ptr()))
      unsupported("object." + name + " with a non-constant name");
    return constant->cast<std::string>();
  };
  bool generic =
      PyType_Check(owner.ptr()) &&
      (name == "__setattr__"
           ? reinterpret_cast<PyTypeObject *>(owner.ptr())->tp_setattro ==
                 PyObject_GenericSetAttr
           : reinterpret_cast<PyTypeObject *>(owner.ptr())->tp_getattro ==
                 PyObject_GenericGetAttr);
  bool objectSlot =
      owner.ptr() == reinterpret_cast<PyObject *>(&PyBaseObject_Type) ||
      (generic && (name == "__setattr__" || name == "__getattribute__"));
  if (objectSlot) {
    if (name == "__setattr__" && args.size() == 2) {
      setRawAttribute(self, nameArgument(), args[1]);
      return none;
    }
    if (name == "__getattribute__" && args.size() == 1)
      return instanceAttribute(self, nameArgument(), false);
    if (name == "__delattr__" && args.size() == 1) {
      const VariablePtr &attributes = self->items[0];
      int index = findKey(attributes, py::str(nameArgument()));
      if (index < 0)
        unsupported("AttributeError deleting '" + nameArgument() + "'");
      attributes->keys.erase(attributes->keys.begin() + index);
      attributes->items.erase(attributes->items.begin() + index);
      return none;
    }
    if (name == "__init__" && args.empty())
      return none;
  } else if (self->items.size() > 1 && !owner.is_none()) {
    if (name == "__init__" && args.empty())
      return none; // dict.__init__() of an instance that starts empty
    if (name == "copy" &&
        owner.ptr() != reinterpret_cast<PyObject *>(&PyDict_Type)) {
      if (!args.empty())
        unsupported(kindNameOf(owner) + ".copy with arguments");
      return copyBuiltinDict(self);
    }
    return callMethodOfContainer(self->items[1], name, args);
  }
  unsupported(py::repr(slot).cast<std::string>() + " on a " +
              kindNameOf(self->object) + " made in the frame");
}

VariablePtr Evaluator::builtinContents(const VariablePtr &value,
                                       const char *specialMethod) {
  if (!value->is(Kind::Instance) || value->items.size() < 2)
    return value;
  PyObject *method = lookUpOnType(value->object, specialMethod);
  if (method && PyFunction_Check(method))
    return value;
  return value->items[1];
}

// ---------------------------------------------------------------------------
// Sets of constants.

void Evaluator::addToSet(const VariablePtr &set, const VariablePtr &item) {
  std::optional<py::object> element = asConstant(item);
  if (!element || PySet_Add(set->object.ptr(), element->ptr()) < 0) {
    PyErr_Clear();
    unsupported("a set of items that are not hashable constants");
  }
}

py::object Evaluator::realSet(const VariablePtr &set) {
  // A copy of a set keeps its table, so its iteration order.
  return set->object.attr("copy")();
}

VariablePtr Evaluator::setFromObject(py::handle object) {
  auto set = Variable::make(Kind::Set);
  madeInstances_ = true;
  set->object = py::reinterpret_steal<py::object>(PySet_New(object.ptr()));
  if (!set->object)
    throw py::error_already_set();
  return set;
}

VariablePtr Evaluator::callMethodOfSet(const VariablePtr &self,
                                       const std::string &name,
                                       std::vector<VariablePtr> &args) {
  // The model is a real set of constants, changed in the order the code
  // changes it, so that it iterates as eager's does.
  py::list constants;
  for (const VariablePtr &arg : args) {
    if (name == "update" || name == "union" || name == "intersection" ||
        name == "difference" || name == "issubset" || name == "issuperset" ||
        name == "isdisjoint" || name == "symmetric_difference") {
      py::list items;
      for (const VariablePtr &item : unpack(arg)) {
        std::optional<py::object> constant = asConstant(item);
        if (!constant)
          unsupported("set." + name + " of a non-constant");
        items.append(*constant);
      }
      constants.append(items);
      continue;
    }
    std::optional<py::object> constant = asConstant(arg);
    if (!constant)
      unsupported("set." + name + " of a non-constant");
    constants.append(*constant);
  }
  static const char *methods[] = {
      "add",          "update",       "discard",    "remove",
      "union",        "intersection", "difference", "symmetric_difference",
      "issubset",     "issuperset",   "isdisjoint", "copy",
      "__contains__", "__len__",      "clear"};
  for (const char *method : methods)
    if (name == method) {
      if (name == "add" || name == "update" || name == "discard" ||
          name == "remove" || name == "clear")
        checkNotInput(self, "changing");
      py::object result;
      try {
        result = self->object.attr(name.c_str())(*py::tuple(constants));
      } catch (py::error_already_set &error) {
        unsupported("set." + name + " raises: " + error.what());
      }
      if (PySet_CheckExact(result.ptr()))
        return setFromObject(result);
      return Variable::constant(result);
    }
  unsupported("method " + name + " of a set");
}

} // namespace kiln::frontend::evaluation
