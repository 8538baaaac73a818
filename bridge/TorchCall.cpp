// One call of torch's own operator for a graph node, resolved ahead of time.
// Depends on ir/, bridge/PythonConversion.h and pybind11.
#include "bridge/TorchCall.h"

#include "ir/Error.h"

#include <cstring>

namespace kiln::python {

py::object resolveTorchOperator(const std::string &qualifiedName) {
  size_t colons = qualifiedName.find("::");
  if (colons == std::string::npos)
    throw Error("operator name '" + qualifiedName +
                "' has no namespace (expected 'aten::name.overload')");
  std::string space = qualifiedName.substr(0, colons);
  std::string rest = qualifiedName.substr(colons + 2);
  size_t dot = rest.find('.');
  std::string name = rest.substr(0, dot);
  std::string overload =
      dot == std::string::npos ? "default" : rest.substr(dot + 1);
  // kiln's own ops (grad mode switches) are Python functions in kiln._ops.
  if (space == "kiln")
    return py::module_::import("kiln._ops").attr(name.c_str());
  try {
    py::object op = TorchHandles::get()
                        .torch.attr("ops")
                        .attr(space.c_str())
                        .attr(name.c_str())
                        .attr(overload.c_str());
    // OpOverload.__call__ only forwards to `_op`, the dispatcher's entry:
    // calling it directly saves a Python frame per node.
    if (py::hasattr(op, "_op"))
      return op.attr("_op");
    return op;
  } catch (py::error_already_set &error) {
    throw Error("torch has no operator " + qualifiedName + " (" +
                std::string(error.what()) + ")");
  }
}

py::object constantTensor(const ConstantData &data) {
  using namespace pybind11::literals;
  const TorchHandles &torch = TorchHandles::get();
  py::tuple sizes(data.meta.sizes.size());
  for (size_t i = 0; i < data.meta.sizes.size(); ++i)
    sizes[i] = py::int_(data.meta.sizes[i]);
  py::object tensor = torch.torch.attr("empty")(
      sizes, "dtype"_a = dtypeToTorch(data.meta.dtype));
  if (!data.bytes.empty()) {
    auto address = tensor.attr("data_ptr")().cast<uintptr_t>();
    std::memcpy(reinterpret_cast<void *>(address), data.bytes.data(),
                data.bytes.size());
  }
  if (data.meta.device.type != DeviceType::CPU)
    tensor = tensor.attr("to")(deviceToTorch(data.meta.device));
  return tensor;
}

void *currentCudaStream(int device) {
  // torch._C._cuda_getCurrentRawStream(index) is the stream's address (what
  // Inductor's launchers read; 0.1 us); torch.cuda.current_stream (a Python
  // function making a Stream object, several us) where a build lacks it.
  // Kept for the process: a function-scope py::object would be released
  // after the interpreter.
  static PyObject *raw = [] {
    py::object found = py::getattr(TorchHandles::get().torch.attr("_C"),
                                   "_cuda_getCurrentRawStream", py::none());
    return found.is_none() ? nullptr : found.release().ptr();
  }();
  py::object stream;
  if (raw) {
    PyObject *index = PyLong_FromLong(device);
    if (!index)
      throw py::error_already_set();
    PyObject *result = PyObject_Vectorcall(raw, &index, 1, nullptr);
    Py_DECREF(index);
    if (!result)
      throw py::error_already_set();
    stream = py::reinterpret_steal<py::object>(result);
  } else {
    stream = TorchHandles::get()
                 .torch.attr("cuda")
                 .attr("current_stream")(device)
                 .attr("cuda_stream");
  }
  void *address = PyLong_AsVoidPtr(stream.ptr());
  if (!address && PyErr_Occurred())
    throw py::error_already_set();
  return address;
}

CallOperand
operandForArgument(const Argument &argument,
                   const std::function<CallOperand(Value *)> &tensorOperand) {
  auto valueOperand = [&](Value *value) {
    if (!value) {
      CallOperand none;
      none.fixed = py::none();
      return none;
    }
    return tensorOperand(value);
  };
  if (argument.isTensor())
    return valueOperand(argument.toTensor());
  CallOperand operand;
  if (argument.isSymbolic()) {
    operand.symbolic = argument.symbolicInts();
    operand.symbolicList = argument.kind() != Argument::Kind::Int;
    return operand;
  }
  if (argument.isTensorList()) {
    operand.isList = true;
    for (Value *value : argument.toTensorList())
      operand.items.push_back(valueOperand(value));
    return operand;
  }
  operand.fixed = argumentToPython(argument, [](Value *) -> py::object {
    throw Error("torch call: unexpected tensor argument");
  });
  return operand;
}

TorchCall::TorchCall(const Node &node,
                     const std::function<CallOperand(Value *)> &tensorOperand) {
  const OpSchema &schema = *node.schema();
  description_ = schema.qualifiedName();
  origin_ = node.origin();
  if (!node.origin().empty())
    description_ += " (from " + node.origin() + ")";
  callable_ = resolveTorchOperator(schema.qualifiedName());
  std::vector<CallOperand> keywordValues;
  std::vector<std::string> keywordNames;
  for (size_t i = 0; i < schema.arguments.size(); ++i) {
    const SchemaArgument &formal = schema.arguments[i];
    const Argument &actual = node.arguments()[i];
    if (!formal.kwargOnly) {
      arguments_.push_back(operandForArgument(actual, tensorOperand));
      continue;
    }
    // Keyword-only arguments left at a default of None need not be passed.
    // Other defaults are: the Python binding may default otherwise where
    // torch's yaml names a constant (`int reduction=Mean` is 0 there).
    if (formal.defaultValue && formal.defaultValue->isNone() && actual.isNone())
      continue;
    keywordValues.push_back(operandForArgument(actual, tensorOperand));
    keywordNames.push_back(formal.name);
  }
  // Nor trailing positional ones at a default of None, or Scalars at their
  // default: the call takes the form the op's Python binding documents,
  // which torch's deprecated signatures (a Scalar moved in front, as in
  // `add(input, alpha, other)`) never take.
  for (size_t i = arguments_.size(); i > 0; --i) {
    const SchemaArgument &formal = schema.arguments[i - 1];
    const Argument &actual = node.arguments()[i - 1];
    bool atDefault = formal.defaultValue && *formal.defaultValue == actual;
    if (formal.kwargOnly || !atDefault ||
        !(actual.isNone() || formal.type.base == SchemaType::Base::Scalar))
      break;
    arguments_.pop_back();
  }
  positionalCount_ = arguments_.size();
  for (CallOperand &value : keywordValues)
    arguments_.push_back(std::move(value));
  if (!keywordNames.empty()) {
    keywordNames_ = py::tuple(keywordNames.size());
    for (size_t i = 0; i < keywordNames.size(); ++i)
      keywordNames_[i] = py::str(keywordNames[i]);
  }
  singleResult_ = schema.returns.size() == 1 && !schema.returns[0].type.isList;
  if (schema.name.rfind("aten::", 0) == 0 && !schema.isMutable()) {
    py::object binding =
        py::module_::import("kiln._ops")
            .attr("generated_binding")(
                schema.name.substr(6),
                schema.overload.empty() ? "default" : schema.overload,
                positionalCount_, keywordNames_ ? keywordNames_ : py::tuple());
    if (!binding.is_none())
      binding_ = std::move(binding);
  }
}

// CPython's own helper that appends a frame to the current exception's
// traceback (declared in an internal header on 3.12).
extern "C" void _PyTraceback_Add(const char *function, const char *filename,
                                 int line);

void addOriginToTraceback(const std::string &origin) {
  size_t in = origin.rfind(" in ");
  if (in == std::string::npos)
    return;
  size_t colon = origin.rfind(':', in);
  if (colon == std::string::npos)
    return;
  int line = 0;
  try {
    line = std::stoi(origin.substr(colon + 1, in - colon - 1));
  } catch (const std::exception &) {
    return;
  }
  _PyTraceback_Add(origin.substr(in + 4).c_str(),
                   origin.substr(0, colon).c_str(), line);
}

void setIndexError(const IndexOutOfRange &error) {
  PyErr_SetString(error.indexError() ? PyExc_IndexError : PyExc_RuntimeError,
                  error.what());
  addOriginToTraceback(error.origin());
}

void TorchCall::raiseWithOrigin() const {
  py::error_already_set error;
  std::string message = "kiln: " + description_ + " failed: " +
                        py::str(error.value()).cast<std::string>();
  // The same exception type, so that callers catching torch's errors still
  // catch them; the original stays attached as the cause.
  try {
    py::object replacement = error.type()(message);
    PyException_SetCause(replacement.ptr(), error.value().inc_ref().ptr());
    PyErr_SetObject(error.type().ptr(), replacement.ptr());
  } catch (py::error_already_set &) {
    error.restore();
  }
  addOriginToTraceback(origin_);
  throw py::error_already_set();
}

PyObject *resolveOperand(const CallOperand &operand,
                         const std::vector<py::object> &slots,
                         std::vector<py::object> &lists,
                         const std::vector<int64_t> *symbols) {
  if (operand.slot >= 0)
    return slots[operand.slot].ptr();
  if (!operand.symbolic.empty()) {
    if (!symbols)
      throw Error("torch call: an argument is a size that varies between "
                  "calls, and the call gives no sizes");
    if (!operand.symbolicList) {
      lists.push_back(py::int_(size::evaluate(operand.symbolic[0], *symbols)));
      return lists.back().ptr();
    }
    py::list values(operand.symbolic.size());
    for (size_t i = 0; i < operand.symbolic.size(); ++i)
      values[i] = py::int_(size::evaluate(operand.symbolic[i], *symbols));
    lists.push_back(std::move(values));
    return lists.back().ptr();
  }
  if (!operand.isList)
    return operand.fixed.ptr();
  py::list list(operand.items.size());
  for (size_t i = 0; i < operand.items.size(); ++i)
    PyList_SET_ITEM(
        list.ptr(), i,
        py::handle(resolveOperand(operand.items[i], slots, lists, symbols))
            .inc_ref()
            .ptr());
  lists.push_back(std::move(list));
  return lists.back().ptr();
}

namespace {

// A `Tensor[]` return comes back as a list, several returns as a tuple, and
// `(Tensor, Tensor[])` nests them: flattened in return order. None stands
// for a result the op left out (a gradient its output mask did not ask for),
// which the graph holds no value for.
void flattenResult(PyObject *object, std::vector<PyObject *> &items) {
  if (PyTuple_Check(object) || PyList_Check(object)) {
    Py_ssize_t size = PySequence_Fast_GET_SIZE(object);
    PyObject **elements = PySequence_Fast_ITEMS(object);
    for (Py_ssize_t i = 0; i < size; ++i)
      flattenResult(elements[i], items);
    return;
  }
  if (object != Py_None)
    items.push_back(object);
}

} // namespace

void TorchCall::run(std::vector<py::object> &slots,
                    const std::vector<int32_t> &resultSlots,
                    const std::vector<int64_t> *symbols) const {
  std::vector<py::object> lists;
  // One spare entry in front lets torch prepend `self` without copying.
  constexpr size_t kInline = 16;
  PyObject *inlineArguments[kInline + 1];
  std::vector<PyObject *> heapArguments;
  PyObject **arguments = inlineArguments;
  if (arguments_.size() > kInline) {
    heapArguments.resize(arguments_.size() + 1);
    arguments = heapArguments.data();
  }
  for (size_t i = 0; i < arguments_.size(); ++i)
    arguments[i + 1] = resolveOperand(arguments_[i], slots, lists, symbols);
  auto call = [&](const py::object &callable) {
    return PyObject_Vectorcall(callable.ptr(), arguments + 1,
                               positionalCount_ |
                                   PY_VECTORCALL_ARGUMENTS_OFFSET,
                               keywordNames_ ? keywordNames_.ptr() : nullptr);
  };
  PyObject *result = nullptr;
  if (binding_) {
    result = call(binding_);
    // The binding's parser may still refuse an argument the boxed call
    // converts (or pick a named-tensor signature): the op is functional,
    // so the boxed call can run it again from the start.
    if (!result)
      PyErr_Clear();
  }
  if (!result)
    result = call(callable_);
  if (!result)
    raiseWithOrigin();
  py::object owned = py::reinterpret_steal<py::object>(result);
  if (resultSlots.empty())
    return;
  if (singleResult_) {
    slots[resultSlots[0]] = std::move(owned);
    return;
  }
  std::vector<PyObject *> items;
  flattenResult(result, items);
  if (items.size() != resultSlots.size())
    throw Error(
        "kiln: " + description_ + " returned " + std::to_string(items.size()) +
        " values but the graph expects " + std::to_string(resultSlots.size()));
  for (size_t i = 0; i < items.size(); ++i)
    slots[resultSlots[i]] = py::reinterpret_borrow<py::object>(items[i]);
}

} // namespace kiln::python
