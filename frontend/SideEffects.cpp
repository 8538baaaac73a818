// Side effects on objects from outside the frame: attribute writes are
// recorded in program order, read back by later loads during the capture,
// and replayed after the graph on every cache hit (GraphBreak.cpp plans
// them). What cannot be modelled faithfully (a custom __setattr__, a
// property, a tensor attribute) stays unsupported: a break or a fallback.
// Depends on frontend/Evaluator.h, pybind11, CPython.
#include "frontend/Evaluator.h"

namespace kiln::frontend::evaluation {

PyObject *lookUpOnType(py::handle type, const std::string &name) {
  py::str key(name);
  return _PyType_Lookup(reinterpret_cast<PyTypeObject *>(type.ptr()),
                        key.ptr());
}

namespace {

/// Whether reading `name` of an instance of `type` can run code that sees
/// the instance's state some other way than its instance dict: a property,
/// a getset descriptor (`__dict__`), any data descriptor but a slot.
bool readThroughDescriptor(py::handle type, const std::string &name) {
  PyObject *attribute = lookUpOnType(type, name);
  if (!attribute)
    return false;
  if (Py_TYPE(attribute) == &PyMemberDescr_Type)
    return false; // a __slots__ entry: plain storage
  return Py_TYPE(attribute)->tp_descr_set != nullptr;
}

} // namespace

bool hasGenericAttributes(py::handle type, bool setter) {
  PyObject *slot =
      lookUpOnType(type, setter ? "__setattr__" : "__getattribute__");
  if (!slot || PyFunction_Check(slot))
    return false;
  py::object owner = py::getattr(slot, "__objclass__", py::none());
  if (!PyType_Check(owner.ptr()))
    return false;
  auto *ownerType = reinterpret_cast<PyTypeObject *>(owner.ptr());
  return setter ? ownerType->tp_setattro == PyObject_GenericSetAttr
                : ownerType->tp_getattro == PyObject_GenericGetAttr;
}

void Evaluator::storeAttr(const VariablePtr &target, const std::string &name,
                          const VariablePtr &value) {
  const Handles &h = Handles::get();
  if (target->is(Kind::Instance)) {
    storeInstanceAttribute(target, name, value);
    return;
  }
  std::string what = "setting attribute '" + name + "'";
  if (!target->is(Kind::Object) && !target->is(Kind::Module) &&
      !target->is(Kind::PythonModule))
    unsupported(what + " of a " + kindNameOf(pythonTypeOf(target)));
  if (!target->object || !target->source)
    unsupported(what + " of an object the next call cannot find again");
  py::handle object = target->object;
  py::handle type = py::type::of(object);
  if (target->is(Kind::PythonModule)) {
    std::string moduleName = object.attr("__name__").cast<std::string>();
    if (isTorchModuleName(moduleName))
      unsupported(what + " of module " + moduleName);
  } else {
    PyObject *setter = lookUpOnType(type, "__setattr__");
    PyObject *moduleSetter = lookUpOnType(h.moduleBase, "__setattr__");
    if (!hasGenericAttributes(type, false))
      unsupported(what + " of a " + typeName(object) +
                  ", whose class overrides __getattribute__");
    if (setter == moduleSetter) {
      // nn.Module.__setattr__ registers parameters, buffers and submodules;
      // any other value lands in the instance dict, as object's does.
      if (value->is(Kind::Tensor) || value->is(Kind::Module))
        unsupported(what + " of a module to a tensor or module");
      for (const char *registry : {"_parameters", "_buffers", "_modules"}) {
        py::object entries = py::getattr(object, registry, py::none());
        if (PyDict_Check(entries.ptr()) &&
            PyDict_Contains(entries.ptr(), py::str(name).ptr()) == 1)
          unsupported(what + ", a registered " + std::string(registry + 1) +
                      " entry of the module");
      }
    } else if (!hasGenericAttributes(type, true)) {
      unsupported(what + " of a " + typeName(object) +
                  ", whose class overrides __setattr__");
    }
    if (readThroughDescriptor(type, name))
      unsupported(what + ", a descriptor (property) of " + typeName(object));
  }
  // The writes are replayed on the object this source finds on later
  // calls (planSideEffects keeps other sources apart from it).
  writtenObjects_.emplace(object.ptr(), target);
  writes_.push_back({target, name, value});
  written_[{object.ptr(), name}] = value;
}

void Evaluator::writeCellContents(const VariablePtr &cell,
                                  const VariablePtr &value) {
  const VariablePtr &object = cell->cells.at(0);
  writtenObjects_.emplace(object->object.ptr(), object);
  writes_.push_back({object, "cell_contents", value});
  written_[{object->object.ptr(), "cell_contents"}] = value;
  cell->items.assign(1, value);
}

VariablePtr Evaluator::writtenAttribute(const VariablePtr &base,
                                        const std::string &name) {
  if (!base->object || writtenObjects_.empty())
    return nullptr;
  auto target = writtenObjects_.find(base->object.ptr());
  if (target == writtenObjects_.end())
    return nullptr;
  auto it = written_.find({base->object.ptr(), name});
  if (it != written_.end())
    return it->second;
  if (!base->is(Kind::PythonModule) &&
      readThroughDescriptor(py::type::of(base->object), name))
    unsupported("reading attribute '" + name + "' of a written " +
                typeName(base->object) + " through a descriptor");
  return nullptr;
}

VariablePtr Evaluator::readEnvironment(const VariablePtr &environment,
                                       const VariablePtr &key,
                                       const VariablePtr *fallback) {
  std::optional<py::object> name = asConstant(key);
  if (!name || !PyUnicode_Check(name->ptr()) || !environment->source)
    unsupported("os.environ read with a non-constant key");
  bool present =
      PySequence_Contains(environment->object.ptr(), name->ptr()) == 1;
  guards_.addCheck(environment->source, containsKey(*name, present));
  if (!present) {
    if (!fallback)
      unsupported("KeyError " + py::repr(*name).cast<std::string>() +
                  " in os.environ");
    return *fallback;
  }
  return wrap(environment->object[*name],
              Source::item(environment->source, *name));
}

VariablePtr Evaluator::hasAttribute(const VariablePtr &value,
                                    const std::string &name) {
  bool present;
  switch (value->kind) {
  case Kind::Instance:
    return Variable::constant(py::bool_(instanceHasAttribute(value, name)));
  case Kind::Set:
    return Variable::constant(
        py::bool_(py::hasattr(pythonTypeOf(value), name.c_str())));
  case Kind::Tensor:
    // A tensor's class is guarded exactly; an input may also carry
    // attributes of its own.
    present = py::hasattr(pythonTypeOf(value), name.c_str());
    if (!present && value->source)
      guards_.addCheck(value->source, frontend::hasAttribute(name, false));
    return Variable::constant(py::bool_(present));
  case Kind::Object:
  case Kind::Module:
  case Kind::PythonModule:
  case Kind::Callable:
  case Kind::Function:
  case Kind::Constant: {
    if (!value->object)
      break;
    if (writtenAttribute(value, name))
      return Variable::constant(py::bool_(true));
    present = py::hasattr(value->object, name.c_str());
    bool constantModule =
        value->is(Kind::PythonModule) &&
        isTorchModuleName(value->object.attr("__name__").cast<std::string>());
    if (value->source && !value->is(Kind::Constant) && !constantModule)
      guards_.addCheck(value->source, frontend::hasAttribute(name, present));
    return Variable::constant(py::bool_(present));
  }
  case Kind::Tuple:
  case Kind::List:
  case Kind::Dict:
    return Variable::constant(
        py::bool_(py::hasattr(pythonTypeOf(value), name.c_str())));
  default:
    break;
  }
  unsupported("hasattr on a " + kindNameOf(pythonTypeOf(value)));
}

} // namespace kiln::frontend::evaluation
