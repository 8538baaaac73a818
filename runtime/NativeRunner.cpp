// The native graph runner: buffers are torch tensors (inputs, outputs,
// extern operands and results) or places in a per-call workspace
// (temporaries); kernels get every buffer's data pointer.
// Depends on backend/CompileGraph.h, runtime/TorchCall.h and pybind11.
#include "runtime/NativeRunner.h"

#include "ir/Error.h"
#include "runtime/EagerRunner.h"

#include <functional>
#include <sstream>

namespace kiln::python {

using loop::Buffer;
using loop::BufferKind;
using loop::Step;

namespace {

char *dataPointer(PyObject *tensor) {
  static PyObject *name = PyUnicode_InternFromString("data_ptr");
  PyObject *address = PyObject_CallMethodNoArgs(tensor, name);
  if (!address)
    throw py::error_already_set();
  auto value = PyLong_AsUnsignedLongLong(address);
  Py_DECREF(address);
  return reinterpret_cast<char *>(static_cast<uintptr_t>(value));
}

py::tuple tupleOf(const Shape &values) {
  py::tuple tuple(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    tuple[i] = py::int_(values[i]);
  return tuple;
}

// Strides matter only for dimensions with more than one element, and not
// at all for empty tensors.
bool sameLayout(const TensorMeta &actual, const TensorMeta &expected) {
  if (actual.dtype != expected.dtype || actual.sizes != expected.sizes)
    return false;
  if (expected.numel() == 0)
    return true;
  for (size_t d = 0; d < expected.sizes.size(); ++d)
    if (expected.sizes[d] > 1 && actual.strides[d] != expected.strides[d])
      return false;
  return true;
}

// One workspace per thread, reused across calls; a nested call on the same
// thread (a torch op calling back into a compiled function) gets its own.
class Workspace {
public:
  explicit Workspace(int64_t bytes) {
    if (bytes <= 0)
      return;
    State &state = threadState();
    if (!state.inUse) {
      state.inUse = true;
      owner_ = &state;
      if (state.bytes < bytes) {
        state.memory.reset(new char[bytes + 64]);
        state.bytes = bytes;
      }
      data_ = align(state.memory.get());
      return;
    }
    local_.reset(new char[bytes + 64]);
    data_ = align(local_.get());
  }
  ~Workspace() {
    if (owner_)
      owner_->inUse = false;
  }
  char *data() const { return data_; }

private:
  struct State {
    std::unique_ptr<char[]> memory;
    int64_t bytes = 0;
    bool inUse = false;
  };
  static State &threadState() {
    thread_local State state;
    return state;
  }
  static char *align(char *pointer) {
    auto address = reinterpret_cast<uintptr_t>(pointer);
    return reinterpret_cast<char *>((address + 63) & ~uintptr_t(63));
  }
  State *owner_ = nullptr;
  std::unique_ptr<char[]> local_;
  char *data_ = nullptr;
};

} // namespace

NativeRunner::NativeRunner(std::shared_ptr<const Graph> graph,
                           OutputForm outputForm, bool checkInputs)
    : outputForm_(outputForm), checkInputs_(checkInputs) {
  if (!graph)
    throw Error("native runner: no graph");
  if (outputForm_ == OutputForm::Single && graph->outputs().size() != 1)
    throw Error("native runner: a single output was asked for, but the "
                "graph has " +
                std::to_string(graph->outputs().size()));
  graphInputCount_ = graph->inputs().size();
  compiled_ = backend::compileGraphForCpu(graph);
  const loop::Program &program = compiled_->program;
  size_t count = program.buffers.size();
  const TorchHandles &torch = TorchHandles::get();
  emptyStrided_ = torch.torch.attr("empty_strided");

  inputBuffers_.assign(graphInputCount_, -1);
  constants_.resize(count);
  constantPointers_.assign(count, nullptr);
  dtypes_.resize(count);
  viewNeedsTensor_.assign(count, false);
  viewsReadyAfter_.resize(program.steps.size() + 1);

  // Which step produces each extern result.
  std::vector<int64_t> producedBy(count, -1);
  for (size_t s = 0; s < program.steps.size(); ++s)
    for (int64_t result : program.steps[s].results)
      producedBy[result] = static_cast<int64_t>(s);

  for (size_t b = 0; b < count; ++b) {
    const Buffer &buffer = program.buffers[b];
    dtypes_[b] = dtypeToTorch(buffer.dtype());
    switch (buffer.kind) {
    case BufferKind::Input:
      if (buffer.graphInput < 0 ||
          buffer.graphInput >= static_cast<int64_t>(graphInputCount_))
        throw Error("native runner: buffer " + buffer.name +
                    " names no graph input");
      inputBuffers_[buffer.graphInput] = static_cast<int64_t>(b);
      break;
    case BufferKind::Constant:
      constants_[b] = constantTensor(*buffer.constant);
      constantPointers_[b] = dataPointer(constants_[b].ptr());
      break;
    case BufferKind::Tensor:
      if (producedBy[b] < 0)
        allocations_.push_back({static_cast<int64_t>(b),
                                tupleOf(buffer.meta.sizes),
                                tupleOf(buffer.meta.strides)});
      break;
    case BufferKind::View: {
      int64_t root = buffer.base;
      while (program.buffers.at(root).kind == BufferKind::View)
        root = program.buffers[root].base;
      viewsReadyAfter_[producedBy[root] + 1].push_back(static_cast<int64_t>(b));
      break;
    }
    case BufferKind::Temporary:
      break;
    }
  }

  // Extern steps: operands read from buffer slots.
  auto tensorOperand = [&](Value *value) {
    auto found = program.bufferOf.find(value);
    if (found == program.bufferOf.end())
      throw Error("native runner: %" + value->name() +
                  " has no buffer for an extern to read");
    const Buffer &buffer = program.buffers[found->second];
    if (buffer.kind == BufferKind::Temporary)
      throw Error("native runner: an extern reads temporary " + buffer.name);
    if (buffer.kind == BufferKind::View)
      viewNeedsTensor_[found->second] = true;
    CallOperand operand;
    operand.slot = static_cast<int32_t>(found->second);
    return operand;
  };
  std::vector<bool> readByKernel(count, false);
  for (const Step &step : program.steps)
    if (step.kind == Step::Kind::Kernel)
      loop::forEachExpr(step.kernel, [&](const loop::Expr *expr) {
        for (const loop::Expr *load : loop::loadsOf(expr))
          readByKernel[load->id()] = true;
      });
  for (size_t b = 0; b < count; ++b)
    if (readByKernel[b] && program.buffers[b].kind == BufferKind::View)
      readByKernel[program.buffers[b].base] = true;
  externs_.resize(program.steps.size());
  for (size_t s = 0; s < program.steps.size(); ++s) {
    const Step &step = program.steps[s];
    if (step.kind != Step::Kind::Extern)
      continue;
    ExternStep &external = externs_[s];
    external.call.emplace(*step.node, tensorOperand);
    for (int64_t result : step.results) {
      external.resultSlots.push_back(static_cast<int32_t>(result));
      if (readByKernel[result])
        external.checkedResults.push_back(result);
    }
  }
  for (const loop::ProgramOutput &output : program.outputs) {
    CallOperand operand;
    if (output.buffer >= 0) {
      if (program.buffers[output.buffer].kind == BufferKind::Temporary)
        throw Error("native runner: an output is temporary buffer " +
                    program.buffers[output.buffer].name);
      if (program.buffers[output.buffer].kind == BufferKind::View)
        viewNeedsTensor_[output.buffer] = true;
      operand.slot = static_cast<int32_t>(output.buffer);
    } else {
      operand.fixed =
          argumentToPython(output.constant, [](Value *) -> py::object {
            throw Error("native runner: a tensor output has no buffer");
          });
    }
    outputs_.push_back(std::move(operand));
  }
}

void NativeRunner::checkInput(size_t index, PyObject *tensor) const {
  const Buffer &buffer = compiled_->program.buffers[inputBuffers_[index]];
  if (!isTensor(tensor))
    throw py::type_error("kiln: input " + std::to_string(index) +
                         " of the compiled graph must be a tensor");
  TensorMeta actual = tensorMetaOf(tensor);
  if (actual.device != buffer.meta.device || !sameLayout(actual, buffer.meta))
    throw py::value_error(
        "kiln: input " + std::to_string(index) + " is " + actual.str() +
        " on " + actual.device.str() + ", but the graph was compiled for " +
        buffer.meta.str() + "; compile again for these inputs");
}

void NativeRunner::readyViews(int64_t afterStep, std::vector<py::object> &slots,
                              std::vector<char *> &pointers) const {
  const loop::Program &program = compiled_->program;
  for (int64_t view : viewsReadyAfter_[afterStep + 1]) {
    const Buffer &buffer = program.buffers[view];
    pointers[view] = pointers[buffer.base] +
                     buffer.meta.storageOffset * itemSize(buffer.dtype());
    if (!viewNeedsTensor_[view])
      continue;
    py::object base = slots[buffer.base];
    int64_t baseOffset = base.attr("storage_offset")().cast<int64_t>();
    slots[view] = base.attr("as_strided")(
        tupleOf(buffer.meta.sizes), tupleOf(buffer.meta.strides),
        baseOffset + buffer.meta.storageOffset);
  }
}

void NativeRunner::conformLayout(int64_t bufferIndex,
                                 std::vector<py::object> &slots,
                                 std::vector<char *> &pointers) const {
  const Buffer &buffer = compiled_->program.buffers[bufferIndex];
  TensorMeta actual = tensorMetaOf(slots[bufferIndex]);
  if (sameLayout(actual, buffer.meta))
    return;
  if (actual.sizes != buffer.meta.sizes || actual.dtype != buffer.dtype())
    throw Error("kiln: an extern call returned " + actual.str() +
                " where the graph expects " + buffer.meta.str());
  // Torch chose other strides than its meta function: copy into the layout
  // the kernels were compiled for.
  using namespace pybind11::literals;
  py::object copy =
      emptyStrided_(tupleOf(buffer.meta.sizes), tupleOf(buffer.meta.strides),
                    "dtype"_a = dtypes_[bufferIndex]);
  copy.attr("copy_")(slots[bufferIndex]);
  slots[bufferIndex] = copy;
  pointers[bufferIndex] = dataPointer(copy.ptr());
}

py::object NativeRunner::run(PyObject *const *inputs, size_t count) const {
  const loop::Program &program = compiled_->program;
  if (count != graphInputCount_)
    throw py::type_error("kiln: the compiled graph takes " +
                         std::to_string(graphInputCount_) + " inputs, got " +
                         std::to_string(count));
  size_t bufferCount = program.buffers.size();
  std::vector<py::object> slots(bufferCount);
  std::vector<char *> pointers(constantPointers_);
  for (size_t i = 0; i < count; ++i) {
    int64_t b = inputBuffers_[i];
    if (b < 0)
      continue;
    if (checkInputs_)
      checkInput(i, inputs[i]);
    slots[b] = py::reinterpret_borrow<py::object>(inputs[i]);
    pointers[b] = dataPointer(inputs[i]);
  }
  for (size_t b = 0; b < bufferCount; ++b)
    if (constants_[b])
      slots[b] = constants_[b];
  static PyObject *dtypeKeyword = [] {
    PyObject *names = PyTuple_New(1);
    PyTuple_SET_ITEM(names, 0, PyUnicode_InternFromString("dtype"));
    return names;
  }();
  for (const Allocation &allocation : allocations_) {
    PyObject *arguments[] = {nullptr, allocation.sizes.ptr(),
                             allocation.strides.ptr(),
                             dtypes_[allocation.buffer].ptr()};
    PyObject *tensor =
        PyObject_Vectorcall(emptyStrided_.ptr(), arguments + 1,
                            2 | PY_VECTORCALL_ARGUMENTS_OFFSET, dtypeKeyword);
    if (!tensor)
      throw py::error_already_set();
    slots[allocation.buffer] = py::reinterpret_steal<py::object>(tensor);
    pointers[allocation.buffer] = dataPointer(tensor);
  }
  Workspace workspace(program.workspaceBytes);
  for (size_t b = 0; b < bufferCount; ++b)
    if (program.buffers[b].kind == BufferKind::Temporary)
      pointers[b] = workspace.data() + program.buffers[b].workspaceOffset;
  readyViews(-1, slots, pointers);

  for (size_t s = 0; s < program.steps.size(); ++s) {
    const Step &step = program.steps[s];
    if (step.kind == Step::Kind::Kernel) {
      compiled_->code->runKernel(s, pointers.data());
      continue;
    }
    const ExternStep &external = externs_[s];
    external.call->run(slots, external.resultSlots);
    for (int32_t result : external.resultSlots)
      if (slots[result])
        pointers[result] = dataPointer(slots[result].ptr());
    for (int64_t result : external.checkedResults)
      conformLayout(result, slots, pointers);
    readyViews(static_cast<int64_t>(s), slots, pointers);
  }
  return packOutputs(outputForm_, outputs_, slots);
}

std::string NativeRunner::describe() const {
  const loop::Program &program = compiled_->program;
  int kernels = 0;
  std::vector<std::string> externs;
  for (const Step &step : program.steps) {
    if (step.kind == Step::Kind::Kernel)
      ++kernels;
    else
      externs.push_back(step.node->schema()->qualifiedName());
  }
  std::ostringstream out;
  out << "native: " << kernels << " kernel(s), " << externs.size()
      << " extern(s)";
  for (size_t i = 0; i < externs.size(); ++i)
    out << (i ? ", " : " [") << externs[i]
        << (i + 1 == externs.size() ? "]" : "");
  return out.str();
}

} // namespace kiln::python
