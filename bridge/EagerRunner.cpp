// The eager graph runner: each Op and Extern node is a call of torch's own
// operator, resolved once; values live in a vector indexed by slot number.
// Depends on ir/, bridge/TorchCall.h and pybind11.
#include "bridge/EagerRunner.h"

#include "ir/Error.h"

#include <climits>
#include <unordered_map>

namespace kiln::python {

EagerRunner::EagerRunner(std::shared_ptr<const Graph> graph,
                         OutputForm outputForm)
    : graph_(std::move(graph)), outputForm_(outputForm) {
  if (!graph_)
    throw Error("eager runner: no graph");
  if (outputForm_ == OutputForm::Single && graph_->outputs().size() != 1)
    throw Error("eager runner: a single output was asked for, but the graph "
                "has " +
                std::to_string(graph_->outputs().size()));
  // Slot of every value produced by an input or an op; constants are fixed
  // operands and take no slot.
  std::unordered_map<const Value *, int32_t> slotOf;
  std::unordered_map<const Value *, py::object> constants;
  auto tensorOperand = [&](Value *value) {
    CallOperand operand;
    if (auto constant = constants.find(value); constant != constants.end()) {
      operand.fixed = constant->second;
      return operand;
    }
    auto slot = slotOf.find(value);
    if (slot == slotOf.end())
      throw Error("eager runner: %" + value->name() +
                  " is read before it is defined");
    operand.slot = slot->second;
    return operand;
  };
  int32_t nextSlot = 0;
  for (const auto &node : graph_->nodes()) {
    switch (node->kind()) {
    case Node::Kind::Input:
      slotOf[node->result()] = nextSlot;
      inputSlots_.push_back(nextSlot++);
      continue;
    case Node::Kind::Constant:
      constants[node->result()] = constantTensor(*node->constant());
      continue;
    case Node::Kind::Op:
    case Node::Kind::Extern:
      break;
    }
    Step step{TorchCall(*node, tensorOperand), {}, {}};
    for (const auto &result : node->results()) {
      slotOf[result.get()] = nextSlot;
      step.resultSlots.push_back(nextSlot++);
    }
    steps_.push_back(std::move(step));
  }
  for (const Argument &output : graph_->outputs())
    outputs_.push_back(operandForArgument(output, tensorOperand));
  slotCount_ = static_cast<size_t>(nextSlot);

  // Release each value after its last reader, so that a long graph does not
  // keep every intermediate alive until it returns.
  std::vector<int> lastUse(slotCount_, -1);
  auto markUses = [&](const CallOperand &operand, int when,
                      auto &self) -> void {
    if (operand.slot >= 0)
      lastUse[operand.slot] = when;
    for (const CallOperand &item : operand.items)
      self(item, when, self);
  };
  for (size_t i = 0; i < steps_.size(); ++i) {
    for (const CallOperand &operand : steps_[i].call.arguments())
      markUses(operand, static_cast<int>(i), markUses);
    for (int32_t slot : steps_[i].resultSlots)
      lastUse[slot] = static_cast<int>(i); // unread results go at once
  }
  for (const CallOperand &output : outputs_)
    markUses(output, INT_MAX, markUses);
  for (size_t slot = 0; slot < slotCount_; ++slot)
    if (lastUse[slot] >= 0 && lastUse[slot] != INT_MAX)
      steps_[lastUse[slot]].releaseAfter.push_back(static_cast<int32_t>(slot));
}

std::string EagerRunner::describe() const {
  return "eager: " + std::to_string(steps_.size()) + " torch call(s)";
}

py::object packOutputs(OutputForm form, const std::vector<CallOperand> &outputs,
                       const std::vector<py::object> &slots) {
  std::vector<py::object> lists;
  auto item = [&](size_t i) {
    return py::handle(resolveOperand(outputs[i], slots, lists)).inc_ref().ptr();
  };
  if (form == OutputForm::Single)
    return py::reinterpret_steal<py::object>(item(0));
  if (form == OutputForm::List) {
    py::list result(outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i)
      PyList_SET_ITEM(result.ptr(), i, item(i));
    return result;
  }
  py::tuple result(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i)
    PyTuple_SET_ITEM(result.ptr(), i, item(i));
  return result;
}

py::object EagerRunner::run(PyObject *const *inputs, size_t count) const {
  if (count != inputSlots_.size())
    throw py::type_error("kiln: the compiled graph takes " +
                         std::to_string(inputSlots_.size()) + " inputs, got " +
                         std::to_string(count));
  std::vector<py::object> slots(slotCount_);
  for (size_t i = 0; i < count; ++i)
    slots[inputSlots_[i]] = py::reinterpret_borrow<py::object>(inputs[i]);
  for (const Step &step : steps_) {
    step.call.run(slots, step.resultSlots);
    for (int32_t slot : step.releaseAfter)
      slots[slot] = py::object();
  }
  return packOutputs(outputForm_, outputs_, slots);
}

} // namespace kiln::python
