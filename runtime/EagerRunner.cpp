// The eager graph runner: each Op and Extern node is a call of torch's own
// operator, resolved once; values live in a vector indexed by slot number.
// Depends on ir/, runtime/PythonConversion.h and pybind11.
#include "runtime/EagerRunner.h"

#include "ir/Error.h"

#include <algorithm>
#include <climits>
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

py::object EagerRunner::constantTensor(const ConstantData &data) const {
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

EagerRunner::Operand EagerRunner::operandFor(const Argument &argument) {
  Operand operand;
  auto valueOperand = [&](Value *value) {
    Operand item;
    if (!value) {
      item.fixed = py::none();
    } else if (auto constant = constants_.find(value);
               constant != constants_.end()) {
      item.fixed = constant->second;
    } else {
      auto slot = slotOf_.find(value);
      if (slot == slotOf_.end())
        throw Error("eager runner: %" + value->name() +
                    " is read before it is defined");
      item.slot = slot->second;
    }
    return item;
  };
  if (argument.isTensor())
    return valueOperand(argument.toTensor());
  if (argument.isTensorList()) {
    operand.isList = true;
    for (Value *value : argument.toTensorList())
      operand.items.push_back(valueOperand(value));
    return operand;
  }
  operand.fixed = argumentToPython(argument, [](Value *) -> py::object {
    throw Error("eager runner: unexpected tensor argument");
  });
  return operand;
}

EagerRunner::EagerRunner(std::shared_ptr<const Graph> graph,
                         OutputForm outputForm)
    : graph_(std::move(graph)), outputForm_(outputForm) {
  if (!graph_)
    throw Error("eager runner: no graph");
  if (outputForm_ == OutputForm::Single && graph_->outputs().size() != 1)
    throw Error("eager runner: a single output was asked for, but the graph "
                "has " +
                std::to_string(graph_->outputs().size()));
  int32_t nextSlot = 0;
  for (const auto &node : graph_->nodes()) {
    switch (node->kind()) {
    case Node::Kind::Input:
      slotOf_[node->result()] = nextSlot;
      inputSlots_.push_back(nextSlot++);
      continue;
    case Node::Kind::Constant:
      constants_[node->result()] = constantTensor(*node->constant());
      continue;
    case Node::Kind::Op:
    case Node::Kind::Extern:
      break;
    }
    const OpSchema &schema = *node->schema();
    Step step;
    step.description = schema.qualifiedName();
    if (!node->origin().empty())
      step.description += " (from " + node->origin() + ")";
    step.callable = resolveTorchOperator(schema.qualifiedName());
    std::vector<Operand> keywordValues;
    std::vector<std::string> keywordNames;
    for (size_t i = 0; i < schema.arguments.size(); ++i) {
      const SchemaArgument &formal = schema.arguments[i];
      const Argument &actual = node->arguments()[i];
      if (!formal.kwargOnly) {
        step.arguments.push_back(operandFor(actual));
        continue;
      }
      // Keyword-only arguments left at their defaults need not be passed.
      if (formal.defaultValue && *formal.defaultValue == actual)
        continue;
      keywordValues.push_back(operandFor(actual));
      keywordNames.push_back(formal.name);
    }
    step.positionalCount = step.arguments.size();
    for (Operand &value : keywordValues)
      step.arguments.push_back(std::move(value));
    if (!keywordNames.empty()) {
      step.keywordNames = py::tuple(keywordNames.size());
      for (size_t i = 0; i < keywordNames.size(); ++i)
        step.keywordNames[i] = py::str(keywordNames[i]);
    }
    maxArguments_ = std::max(maxArguments_, step.arguments.size());
    step.singleResult =
        schema.returns.size() == 1 && !schema.returns[0].type.isList;
    for (const auto &result : node->results()) {
      slotOf_[result.get()] = nextSlot;
      step.resultSlots.push_back(nextSlot++);
    }
    steps_.push_back(std::move(step));
  }
  for (const Argument &output : graph_->outputs())
    outputs_.push_back(operandFor(output));
  slotCount_ = static_cast<size_t>(nextSlot);

  // Release each value after its last reader, so that a long graph does not
  // keep every intermediate alive until it returns.
  std::vector<int> lastUse(slotCount_, -1);
  auto markUses = [&](const Operand &operand, int when, auto &self) -> void {
    if (operand.slot >= 0)
      lastUse[operand.slot] = when;
    for (const Operand &item : operand.items)
      self(item, when, self);
  };
  for (size_t i = 0; i < steps_.size(); ++i) {
    for (const Operand &operand : steps_[i].arguments)
      markUses(operand, static_cast<int>(i), markUses);
    for (int32_t slot : steps_[i].resultSlots)
      lastUse[slot] = static_cast<int>(i); // unread results go at once
  }
  for (const Operand &output : outputs_)
    markUses(output, INT_MAX, markUses);
  for (size_t slot = 0; slot < slotCount_; ++slot)
    if (lastUse[slot] >= 0 && lastUse[slot] != INT_MAX)
      steps_[lastUse[slot]].releaseAfter.push_back(static_cast<int32_t>(slot));
}

void EagerRunner::raiseWithOrigin(const Step &step) const {
  py::error_already_set error;
  std::string message = "kiln: " + step.description + " failed: " +
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
  throw py::error_already_set();
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

void EagerRunner::storeResults(const Step &step, PyObject *result,
                               std::vector<py::object> &slots) const {
  py::object owned = py::reinterpret_steal<py::object>(result);
  if (step.resultSlots.empty())
    return;
  if (step.singleResult) {
    slots[step.resultSlots[0]] = std::move(owned);
    return;
  }
  std::vector<PyObject *> items;
  flattenResult(result, items);
  if (items.size() != step.resultSlots.size())
    throw Error("kiln: " + step.description + " returned " +
                std::to_string(items.size()) +
                " values but the graph expects " +
                std::to_string(step.resultSlots.size()));
  for (size_t i = 0; i < items.size(); ++i)
    slots[step.resultSlots[i]] = py::reinterpret_borrow<py::object>(items[i]);
}

py::object EagerRunner::run(PyObject *const *inputs, size_t count) const {
  if (count != inputSlots_.size())
    throw py::type_error("kiln: the compiled graph takes " +
                         std::to_string(inputSlots_.size()) + " inputs, got " +
                         std::to_string(count));
  std::vector<py::object> slots(slotCount_);
  for (size_t i = 0; i < count; ++i)
    slots[inputSlots_[i]] = py::reinterpret_borrow<py::object>(inputs[i]);

  // Lists of tensors are the only arguments built per call.
  std::vector<py::object> lists;
  auto resolve = [&](const Operand &operand, auto &self) -> PyObject * {
    if (operand.slot >= 0)
      return slots[operand.slot].ptr();
    if (!operand.isList)
      return operand.fixed.ptr();
    py::list list(operand.items.size());
    for (size_t i = 0; i < operand.items.size(); ++i)
      PyList_SET_ITEM(list.ptr(), i,
                      py::handle(self(operand.items[i], self)).inc_ref().ptr());
    lists.push_back(std::move(list));
    return lists.back().ptr();
  };

  // One spare entry in front lets torch prepend `self` without copying.
  std::vector<PyObject *> arguments(maxArguments_ + 1);
  for (const Step &step : steps_) {
    for (size_t i = 0; i < step.arguments.size(); ++i)
      arguments[i + 1] = resolve(step.arguments[i], resolve);
    PyObject *result = PyObject_Vectorcall(
        step.callable.ptr(), arguments.data() + 1,
        step.positionalCount | PY_VECTORCALL_ARGUMENTS_OFFSET,
        step.keywordNames ? step.keywordNames.ptr() : nullptr);
    lists.clear();
    if (!result)
      raiseWithOrigin(step);
    storeResults(step, result, slots);
    for (int32_t slot : step.releaseAfter)
      slots[slot] = py::object();
  }

  if (outputForm_ == OutputForm::Single)
    return py::reinterpret_borrow<py::object>(resolve(outputs_[0], resolve));
  if (outputForm_ == OutputForm::List) {
    py::list result(outputs_.size());
    for (size_t i = 0; i < outputs_.size(); ++i)
      PyList_SET_ITEM(
          result.ptr(), i,
          py::handle(resolve(outputs_[i], resolve)).inc_ref().ptr());
    return result;
  }
  py::tuple result(outputs_.size());
  for (size_t i = 0; i < outputs_.size(); ++i)
    PyTuple_SET_ITEM(result.ptr(), i,
                     py::handle(resolve(outputs_[i], resolve)).inc_ref().ptr());
  return result;
}

} // namespace kiln::python
