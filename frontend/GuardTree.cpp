// The guard tree: checks on sources, evaluated in one pass.
// Depends on frontend/Source.h, ir/TensorMeta.h, CPython.
#include "frontend/GuardTree.h"

#include "bridge/PythonConversion.h"

namespace kiln::frontend {
namespace {

// Interned attribute names: attribute lookups with them skip hashing.
struct Names {
  PyObject *shape = PyUnicode_InternFromString("shape");
  PyObject *stride = PyUnicode_InternFromString("stride");
  PyObject *dtype = PyUnicode_InternFromString("dtype");
  PyObject *requiresGrad = PyUnicode_InternFromString("requires_grad");
  PyObject *isCpu = PyUnicode_InternFromString("is_cpu");
  PyObject *isCuda = PyUnicode_InternFromString("is_cuda");
  PyObject *isMeta = PyUnicode_InternFromString("is_meta");
  PyObject *getDevice = PyUnicode_InternFromString("get_device");
  PyObject *cellContents = PyUnicode_InternFromString("cell_contents");
};

const Names &names() {
  static const Names *instance = new Names();
  return *instance;
}

/// Reads item `i` of a tuple of exact Python ints; false for anything else
/// (another type, a value past int64).
bool tupleInt(PyObject *tuple, size_t i, long long &value) {
  PyObject *item = PyTuple_GET_ITEM(tuple, i);
  if (!PyLong_CheckExact(item))
    return false;
  int overflow = 0;
  value = PyLong_AsLongLongAndOverflow(item, &overflow);
  return !overflow;
}

bool isTupleOfLength(PyObject *tuple, size_t length) {
  return PyTuple_Check(tuple) &&
         PyTuple_GET_SIZE(tuple) == static_cast<Py_ssize_t>(length);
}

// Compares a tuple of Python ints with expected values.
bool intTupleEquals(PyObject *tuple, const Shape &expected) {
  if (!isTupleOfLength(tuple, expected.size()))
    return false;
  for (size_t i = 0; i < expected.size(); ++i) {
    long long value = 0;
    if (!tupleInt(tuple, i, value) || value != expected[i])
      return false;
  }
  return true;
}

// Compares a tuple of Python ints with size expressions: a symbol not yet
// bound takes the item's value (sizes only, at least 2: 0 and 1 are
// specialised), others must evaluate to it.
bool intTupleMatches(PyObject *tuple, const std::vector<SymSize> &expected,
                     std::vector<int64_t> &symbols, bool bind) {
  if (!isTupleOfLength(tuple, expected.size()))
    return false;
  for (size_t i = 0; i < expected.size(); ++i) {
    long long value = 0;
    if (!tupleInt(tuple, i, value))
      return false;
    SymSize expr = expected[i];
    if (expr->kind() == SizeKind::Symbol && symbols.at(expr->value()) < 0) {
      if (!bind || value < 2)
        return false;
      symbols[expr->value()] = value;
      continue;
    }
    for (int64_t symbol : size::symbolsOf(expr))
      if (symbols.at(symbol) < 0)
        return false;
    if (size::evaluate(expr, symbols) != value)
      return false;
  }
  return true;
}

bool attrIs(PyObject *object, PyObject *name, PyObject *expected) {
  PyObject *value = PyObject_GetAttr(object, name);
  if (!value) {
    PyErr_Clear();
    return false;
  }
  bool same = value == expected;
  Py_DECREF(value);
  return same;
}

bool tensorMatches(PyObject *object, const GuardCheck &check,
                   std::vector<int64_t> &symbols) {
  const Names &n = names();
  if (reinterpret_cast<PyObject *>(Py_TYPE(object)) != check.expected.ptr())
    return false;
  const TensorMeta &meta = check.tensor;
  if (!attrIs(object, n.dtype, python::dtypeToTorch(meta.dtype).ptr()))
    return false;
  switch (meta.device.type) {
  case DeviceType::CPU:
    if (!attrIs(object, n.isCpu, Py_True))
      return false;
    break;
  case DeviceType::Meta:
    if (!attrIs(object, n.isMeta, Py_True))
      return false;
    break;
  case DeviceType::CUDA: {
    if (!attrIs(object, n.isCuda, Py_True))
      return false;
    PyObject *index = PyObject_CallMethodNoArgs(object, n.getDevice);
    if (!index) {
      PyErr_Clear();
      return false;
    }
    bool same = PyLong_AsLong(index) == std::max(meta.device.index, 0);
    Py_DECREF(index);
    if (!same)
      return false;
    break;
  }
  }
  if (!attrIs(object, n.requiresGrad, check.requiresGrad ? Py_True : Py_False))
    return false;
  PyObject *shape = PyObject_GetAttr(object, n.shape);
  if (!shape) {
    PyErr_Clear();
    return false;
  }
  const SymbolicLayout *symbolic =
      meta.isSymbolic() ? meta.symbolic.get() : nullptr;
  bool sizesMatch = symbolic
                        ? intTupleMatches(shape, symbolic->sizes, symbols, true)
                        : intTupleEquals(shape, meta.sizes);
  Py_DECREF(shape);
  if (!sizesMatch)
    return false;
  PyObject *strides = PyObject_CallMethodNoArgs(object, n.stride);
  if (!strides) {
    PyErr_Clear();
    return false;
  }
  bool stridesMatch =
      symbolic ? intTupleMatches(strides, symbolic->strides, symbols, false)
               : intTupleEquals(strides, meta.strides);
  Py_DECREF(strides);
  return stridesMatch;
}

bool checkPasses(PyObject *value, const GuardCheck &check,
                 std::vector<int64_t> &symbols) {
  switch (check.kind) {
  case GuardCheck::Kind::TensorMatch:
    return tensorMatches(value, check, symbols);
  case GuardCheck::Kind::TypeIs:
    return reinterpret_cast<PyObject *>(Py_TYPE(value)) == check.expected.ptr();
  case GuardCheck::Kind::IdIs: {
    PyObject *expected = check.expected.ptr();
    if (PyWeakref_CheckRef(expected))
      expected = PyWeakref_GetObject(expected);
    return value == expected;
  }
  case GuardCheck::Kind::HasAttr: {
    int present = PyObject_HasAttr(value, check.expected.ptr());
    return (present == 1) == check.flag;
  }
  case GuardCheck::Kind::Contains: {
    int present = PySequence_Contains(value, check.expected.ptr());
    if (present < 0)
      PyErr_Clear();
    return (present == 1) == check.flag;
  }
  case GuardCheck::Kind::Equals: {
    if (Py_TYPE(value) != Py_TYPE(check.expected.ptr()))
      return false;
    int equal = PyObject_RichCompareBool(value, check.expected.ptr(), Py_EQ);
    if (equal < 0)
      PyErr_Clear();
    return equal == 1;
  }
  case GuardCheck::Kind::Length: {
    Py_ssize_t length = PyObject_Length(value);
    if (length < 0)
      PyErr_Clear();
    return length == check.length;
  }
  case GuardCheck::Kind::DictKeys: {
    if (!PyDict_Check(value) ||
        PyDict_Size(value) != PyTuple_GET_SIZE(check.expected.ptr()))
      return false;
    Py_ssize_t position = 0, i = 0;
    PyObject *key, *item;
    while (PyDict_Next(value, &position, &key, &item)) {
      int equal = PyObject_RichCompareBool(
          key, PyTuple_GET_ITEM(check.expected.ptr(), i++), Py_EQ);
      if (equal != 1) {
        if (equal < 0)
          PyErr_Clear();
        return false;
      }
    }
    return true;
  }
  case GuardCheck::Kind::GradMode:
  case GuardCheck::Kind::DefaultDType:
  case GuardCheck::Kind::SameAs:
  case GuardCheck::Kind::NotSameAs:
    return false; // evaluated separately
  }
  return false;
}

std::string describe(const GuardCheck &check) {
  switch (check.kind) {
  case GuardCheck::Kind::TensorMatch:
    return "tensor " + check.tensor.str() +
           (check.requiresGrad ? " requires_grad" : "");
  case GuardCheck::Kind::TypeIs:
    return "type is " + py::str(check.expected).cast<std::string>();
  case GuardCheck::Kind::IdIs: {
    PyObject *expected = check.expected.ptr();
    if (PyWeakref_CheckRef(expected))
      expected = PyWeakref_GetObject(expected);
    return "is the same " + std::string(Py_TYPE(expected)->tp_name) + " object";
  }
  case GuardCheck::Kind::NotSameAs:
    return "is not the object of guard " + std::to_string(check.length);
  case GuardCheck::Kind::HasAttr:
    return std::string(check.flag ? "has" : "lacks") + " attribute " +
           py::str(check.expected).cast<std::string>();
  case GuardCheck::Kind::Contains:
    return std::string(check.flag ? "contains " : "lacks ") +
           py::repr(check.expected).cast<std::string>();
  case GuardCheck::Kind::Equals:
    return "== " + py::repr(check.expected).cast<std::string>();
  case GuardCheck::Kind::Length:
    return "len == " + std::to_string(check.length);
  case GuardCheck::Kind::DictKeys:
    return "keys == " + py::repr(check.expected).cast<std::string>();
  case GuardCheck::Kind::GradMode:
    return std::string("torch.is_grad_enabled() == ") +
           (check.flag ? "True" : "False");
  case GuardCheck::Kind::SameAs:
    return "is the object of guard " + std::to_string(check.length);
  case GuardCheck::Kind::DefaultDType:
    return "torch.get_default_dtype() is " +
           py::str(check.expected).cast<std::string>();
  }
  return "?";
}

constexpr const char *kGetDefaultDType[] = {"get_default_dtype", nullptr};
constexpr const char *kIsGradEnabled[] = {"is_grad_enabled", nullptr};

// torch.get_default_dtype(), a new reference (null on failure, cleared).
PyObject *currentDefaultDType() {
  return python::callTorchState<kGetDefaultDType>();
}

bool gradModeEnabled() {
  PyObject *result = python::callTorchState<kIsGradEnabled>();
  if (!result)
    return true;
  bool enabled = result == Py_True;
  Py_DECREF(result);
  return enabled;
}

// The builtins a frame with these globals sees.
PyObject *builtinsOf(PyObject *globals) {
  PyObject *builtins = PyDict_GetItemString(globals, "__builtins__");
  if (builtins && PyModule_Check(builtins))
    builtins = PyModule_GetDict(builtins);
  return builtins ? builtins : PyEval_GetBuiltins();
}

// Reads one source from its parent's value (or the frame); a new reference,
// or null (error cleared) when the access fails.
PyObject *access(const Source &source, PyObject *parent,
                 const FrameInputs &frame) {
  PyObject *result = nullptr;
  switch (source.kind) {
  case Source::Kind::Local:
    if (source.index < frame.localCount && frame.locals[source.index]) {
      result = frame.locals[source.index];
      Py_INCREF(result);
    }
    return result;
  case Source::Kind::Global:
    result = PyDict_GetItemWithError(frame.globals, source.nameObject.ptr());
    Py_XINCREF(result);
    break;
  case Source::Kind::Builtin: {
    if (PyDict_GetItemWithError(frame.globals, source.nameObject.ptr()))
      return nullptr; // shadowed by a global now
    PyObject *builtins =
        frame.builtins ? frame.builtins : builtinsOf(frame.globals);
    result = builtins
                 ? PyDict_GetItemWithError(builtins, source.nameObject.ptr())
                 : nullptr;
    Py_XINCREF(result);
    break;
  }
  case Source::Kind::Cell: {
    if (!frame.closure || source.index >= PyTuple_GET_SIZE(frame.closure))
      return nullptr;
    result = PyCell_Get(PyTuple_GET_ITEM(frame.closure, source.index));
    break;
  }
  case Source::Kind::Fixed:
    result = source.key.ptr();
    Py_INCREF(result);
    return result;
  case Source::Kind::Attr:
    result = PyObject_GetAttr(parent, source.nameObject.ptr());
    break;
  case Source::Kind::Item:
    result = PyObject_GetItem(parent, source.key.ptr());
    break;
  }
  if (!result)
    PyErr_Clear();
  return result;
}

} // namespace

GuardCheck tensorMatch(py::handle tensor, const TensorMeta &meta) {
  GuardCheck check{GuardCheck::Kind::TensorMatch, {}, meta};
  check.expected = py::reinterpret_borrow<py::object>(
      reinterpret_cast<PyObject *>(Py_TYPE(tensor.ptr())));
  check.requiresGrad = tensor.attr("requires_grad").cast<bool>();
  return check;
}

GuardCheck identity(py::handle object) {
  // A method bound to a class (dict.fromkeys, chain.from_iterable) is a new
  // object at each access: equal (the same function of the same class) is
  // what is meant.
  PyObject *self = nullptr;
  if (PyCFunction_Check(object.ptr()))
    self = PyCFunction_GET_SELF(object.ptr());
  else if (PyMethod_Check(object.ptr()))
    self = PyMethod_GET_SELF(object.ptr());
  if (self && PyType_Check(self))
    return equalsConstant(object);
  GuardCheck check{GuardCheck::Kind::IdIs, {}, {}};
  PyObject *ref = PyWeakref_NewRef(object.ptr(), nullptr);
  if (ref) {
    check.expected = py::reinterpret_steal<py::object>(ref);
  } else {
    PyErr_Clear();
    check.expected = py::reinterpret_borrow<py::object>(object);
  }
  return check;
}

GuardCheck containsKey(py::handle key, bool present) {
  GuardCheck check{GuardCheck::Kind::Contains, {}, {}};
  check.expected = py::reinterpret_borrow<py::object>(key);
  check.flag = present;
  return check;
}

GuardCheck hasAttribute(const std::string &name, bool present) {
  GuardCheck check{GuardCheck::Kind::HasAttr, {}, {}};
  check.expected = py::str(name);
  check.flag = present;
  return check;
}

GuardCheck typeIs(py::handle type) {
  GuardCheck check{GuardCheck::Kind::TypeIs, {}, {}};
  check.expected = py::reinterpret_borrow<py::object>(type);
  return check;
}

GuardCheck equalsConstant(py::handle constant) {
  GuardCheck check{GuardCheck::Kind::Equals, {}, {}};
  check.expected = py::reinterpret_borrow<py::object>(constant);
  return check;
}

GuardCheck defaultDType() {
  GuardCheck check{GuardCheck::Kind::DefaultDType, {}, {}};
  check.expected = py::reinterpret_steal<py::object>(currentDefaultDType());
  return check;
}

int GuardTree::nodeFor(const SourcePtr &source) {
  std::string key = source->str();
  auto it = nodeBySource_.find(key);
  if (it != nodeBySource_.end())
    return it->second;
  int parent = source->base ? nodeFor(source->base) : -1;
  nodes_.push_back(Node{source, parent, {}});
  int index = static_cast<int>(nodes_.size()) - 1;
  nodeBySource_[key] = index;
  return index;
}

void GuardTree::addCheck(const SourcePtr &source, GuardCheck check) {
  if (!source) {
    globalChecks_.push_back(std::move(check));
    return;
  }
  std::vector<GuardCheck> &checks = nodes_[nodeFor(source)].checks;
  // A check asked for twice (hasattr, identity of a written object, the
  // keys of torch's global hook dicts for every inlined module) is kept
  // once. Tensor checks are never repeated: their source is read once.
  for (const GuardCheck &existing : checks)
    if (existing.kind == check.kind && existing.flag == check.flag &&
        existing.length == check.length &&
        (existing.expected.ptr() == check.expected.ptr() ||
         ((check.kind == GuardCheck::Kind::HasAttr ||
           check.kind == GuardCheck::Kind::Contains ||
           check.kind == GuardCheck::Kind::DictKeys) &&
          existing.expected.equal(check.expected))) &&
        check.kind != GuardCheck::Kind::TensorMatch)
      return;
  checks.push_back(std::move(check));
}

void GuardTree::addGraphInput(const SourcePtr &source) {
  graphInputs_.push_back(nodeFor(source));
}

void GuardTree::addRelation(const SourcePtr &source, const SourcePtr &other,
                            GuardCheck::Kind kind) {
  // The check sits on whichever node is read later and names the other.
  int first = nodeFor(other);
  int second = nodeFor(source);
  if (first > second)
    std::swap(first, second);
  GuardCheck check{kind, {}, {}};
  check.length = first;
  nodes_[second].checks.push_back(std::move(check));
}

void GuardTree::addSameAs(const SourcePtr &source, const SourcePtr &other) {
  addRelation(source, other, GuardCheck::Kind::SameAs);
}

void GuardTree::addDistinctFrom(const SourcePtr &source,
                                const SourcePtr &other) {
  addRelation(source, other, GuardCheck::Kind::NotSameAs);
}

int GuardTree::addRead(const SourcePtr &source) {
  reads_.push_back(nodeFor(source));
  return static_cast<int>(reads_.size()) - 1;
}

bool GuardTree::evaluate(const FrameInputs &frame,
                         std::vector<py::object> &graphInputs,
                         std::string *failure, std::vector<py::object> *reads,
                         std::vector<int64_t> *symbolValues) const {
  for (const GuardCheck &check : globalChecks_) {
    bool passes = true;
    if (check.kind == GuardCheck::Kind::GradMode) {
      passes = gradModeEnabled() == check.flag;
    } else if (check.kind == GuardCheck::Kind::DefaultDType) {
      PyObject *dtype = currentDefaultDType();
      passes = dtype == check.expected.ptr(); // dtypes are singletons
      Py_XDECREF(dtype);
    }
    if (!passes) {
      if (failure)
        *failure = describe(check);
      return false;
    }
  }
  std::vector<py::object> values(nodes_.size());
  std::vector<int64_t> symbols(symbolCount_, -1);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node &node = nodes_[i];
    PyObject *parent = node.parent >= 0 ? values[node.parent].ptr() : nullptr;
    PyObject *value = access(*node.source, parent, frame);
    if (!value) {
      if (failure)
        *failure = node.source->str() + " could not be read";
      return false;
    }
    values[i] = py::reinterpret_steal<py::object>(value);
    for (const GuardCheck &check : node.checks) {
      bool passes = check.kind == GuardCheck::Kind::SameAs
                        ? check.length < static_cast<int64_t>(i) &&
                              values[check.length].ptr() == value
                    : check.kind == GuardCheck::Kind::NotSameAs
                        ? check.length < static_cast<int64_t>(i) &&
                              values[check.length].ptr() != value
                        : checkPasses(value, check, symbols);
      if (!passes) {
        if (failure)
          *failure = node.source->str() + " " + describe(check);
        return false;
      }
    }
  }
  if (symbolCount_ > 0) {
    for (int64_t symbol = 0; symbol < symbolCount_; ++symbol) {
      if (symbols[symbol] < 0) {
        if (failure)
          *failure = "size symbol s" + std::to_string(symbol) + " unbound";
        return false;
      }
    }
    for (const SizeRelation &relation : relations_) {
      if (!relation.holds(symbols)) {
        if (failure)
          *failure = "size relation " + relation.str() + " failed";
        return false;
      }
    }
  }
  graphInputs.clear();
  for (int node : graphInputs_)
    graphInputs.push_back(values[node]);
  if (reads) {
    reads->clear();
    for (int node : reads_)
      reads->push_back(values[node]);
  }
  if (symbolValues)
    *symbolValues = std::move(symbols);
  return true;
}

void GuardTree::setSizeRelations(int64_t symbolCount,
                                 std::vector<SizeRelation> relations) {
  symbolCount_ = symbolCount;
  relations_ = std::move(relations);
}

std::string GuardTree::str() const {
  std::string text;
  for (const GuardCheck &check : globalChecks_)
    text += "  " + describe(check) + "\n";
  for (const Node &node : nodes_)
    for (const GuardCheck &check : node.checks)
      text += "  " + node.source->str() + " " + describe(check) + "\n";
  for (int64_t symbol = 0; symbol < symbolCount_; ++symbol)
    text += "  s" + std::to_string(symbol) + " >= 2\n";
  for (const SizeRelation &relation : relations_)
    text += "  " + relation.str() + "\n";
  return text;
}

size_t GuardTree::checkCount() const {
  size_t count = globalChecks_.size();
  for (const Node &node : nodes_)
    count += node.checks.size();
  return count;
}

} // namespace kiln::frontend
