// The native graph runner: buffers are torch tensors (inputs, outputs,
// extern operands and results) or places in a per-call workspace
// (temporaries); the runtime's executor runs the steps.
// Depends on runtime/, bridge/TorchCall.h and pybind11.
#include "bridge/NativeRunner.h"

#include "bridge/EagerRunner.h"
#include "bridge/PooledTensor.h"
#include "bridge/TorchAbi.h"
#include "ir/Error.h"
#include "passes/Scheduler.h"
#include "runtime/CudaDevice.h"
#include "runtime/HostMemoryPool.h"
#include "runtime/ProgramExecutor.h"

namespace kiln::python {

using loop::Buffer;
using loop::BufferKind;
using loop::Step;

namespace {

PyObject *keywordNames(std::initializer_list<const char *> names) {
  PyObject *tuple = PyTuple_New(static_cast<Py_ssize_t>(names.size()));
  Py_ssize_t index = 0;
  for (const char *name : names)
    PyTuple_SET_ITEM(tuple, index++, PyUnicode_InternFromString(name));
  return tuple;
}

py::tuple tupleOf(const Shape &values) {
  py::tuple tuple(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    tuple[i] = py::int_(values[i]);
  return tuple;
}

} // namespace

/// A call's buffers as torch tensors: inputs, allocations (torch's
/// empty_strided), extern results, views that leave the kernels.
class NativeRunner::TorchHost : public runtime::ExecutionHost {
public:
  TorchHost(const NativeRunner &runner, std::vector<py::object> &slots,
            const CallState *state)
      : ExecutionHost(*runner.compiled_), runner_(runner), slots_(slots),
        state_(state) {}

  /// Buffer `buffer`'s layout in this call.
  const TensorMeta &metaOf(int64_t buffer) const {
    return state_ ? state_->layout.metas[buffer]
                  : runner_.program().buffers[buffer].meta;
  }

  char *allocate(int64_t buffer) override {
    // The device keyword only for GPU programs: the CPU's is the default.
    static PyObject *dtypeKeyword = keywordNames({"dtype"});
    static PyObject *dtypeAndDevice = keywordNames({"dtype", "device"});
    const Allocation &allocation =
        state_ ? state_->allocations[buffer] : runner_.allocations_[buffer];
    const TensorMeta &meta = metaOf(buffer);
    if (allocation.pooled) {
      py::object tensor = pooledCpuTensor(meta.sizes, meta.strides, meta.dtype,
                                          allocation.bytes);
      if (tensor) {
        slots_[buffer] = std::move(tensor);
        return dataPointer(slots_[buffer].ptr());
      }
    }
    // torch's own constructor through its C functions where it has them
    // (about 1 us a tensor on a GPU, against 2-4 through Python's argument
    // parsing), else torch.empty_strided.
    char *data = nullptr;
    py::object direct = emptyStridedDirect(meta.sizes, meta.strides, meta.dtype,
                                           runner_.device_, &data);
    if (direct) {
      slots_[buffer] = std::move(direct);
      return data;
    }
    PyObject *arguments[] = {
        nullptr, allocation.sizes.ptr(), allocation.strides.ptr(),
        runner_.dtypes_[buffer].ptr(), runner_.torchDevice_.ptr()};
    PyObject *tensor =
        PyObject_Vectorcall(runner_.emptyStrided_.ptr(), arguments + 1,
                            2 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                            runner_.onGpu_ ? dtypeAndDevice : dtypeKeyword);
    if (!tensor)
      throw py::error_already_set();
    slots_[buffer] = py::reinterpret_steal<py::object>(tensor);
    return dataPointer(tensor);
  }

  char *constantAddress(int64_t buffer) override {
    if (!runner_.onGpu_)
      return ExecutionHost::constantAddress(buffer);
    return dataPointer(runner_.constants_[buffer].ptr()); // on the GPU
  }

  runtime::Workspace workspace(int64_t bytes) override {
    if (!runner_.onGpu_ || bytes <= 0)
      return ExecutionHost::workspace(bytes);
    // From torch's caching allocator, on the call's stream.
    using namespace pybind11::literals;
    char *data = nullptr;
    workspace_ = emptyStridedDirect({bytes + 256}, {1}, DType::UInt8,
                                    runner_.device_, &data);
    if (!workspace_) {
      workspace_ = TorchHandles::get().torch.attr("empty")(
          py::make_tuple(bytes + 256), "dtype"_a = dtypeToTorch(DType::UInt8),
          "device"_a = runner_.torchDevice_);
      data = dataPointer(workspace_.ptr());
    }
    auto address = reinterpret_cast<uintptr_t>(data);
    return runtime::Workspace(
        nullptr, reinterpret_cast<char *>((address + 255) & ~uintptr_t(255)),
        nullptr);
  }

  backend::LaunchContext launchContext() override {
    backend::LaunchContext context;
    if (!runner_.onGpu_)
      return context;
    context.stream = currentCudaStream(runner_.gpu_);
    return context;
  }

  void runExtern(size_t step, std::vector<char *> &addresses) override {
    const std::vector<int32_t> &resultSlots = runner_.resultSlots_[step];
    runner_.externs_[step]->run(slots_, resultSlots,
                                state_ ? &state_->layout.symbols : nullptr);
    for (int32_t result : resultSlots)
      if (slots_[result])
        addresses[result] = dataPointer(slots_[result].ptr());
    for (int64_t result : runner_.compiled_->resultsReadByKernels(step))
      conformLayout(result, addresses);
  }

  void release(int64_t buffer) override {
    // Torch frees the memory once no other tensor holds it (a view the
    // caller got keeps it).
    slots_[buffer] = py::object();
  }

  void viewReady(int64_t view, std::vector<char *> &) override {
    if (!runner_.compiled_->viewLeavesKernels(view))
      return;
    const Buffer &buffer = runner_.program().buffers[view];
    const TensorMeta &meta = metaOf(view);
    py::object base = slots_[buffer.base];
    int64_t baseOffset = base.attr("storage_offset")().cast<int64_t>();
    slots_[view] =
        base.attr("as_strided")(tupleOf(meta.sizes), tupleOf(meta.strides),
                                baseOffset + meta.storageOffset);
  }

private:
  // Torch may choose other strides than its meta function: copy into the
  // layout the kernels were compiled for.
  void conformLayout(int64_t bufferIndex, std::vector<char *> &addresses) {
    const TensorMeta &expected = metaOf(bufferIndex);
    TensorMeta actual = tensorMetaOf(slots_[bufferIndex]);
    if (runtime::sameLayout(actual, expected))
      return;
    if (actual.sizes != expected.sizes || actual.dtype != expected.dtype)
      throw Error("kiln: an extern call returned " + actual.str() +
                  " where the graph expects " + expected.str());
    using namespace pybind11::literals;
    py::object copy = runner_.emptyStrided_(
        tupleOf(expected.sizes), tupleOf(expected.strides),
        "dtype"_a = runner_.dtypes_[bufferIndex],
        "device"_a = runner_.torchDevice_);
    copy.attr("copy_")(slots_[bufferIndex]);
    slots_[bufferIndex] = copy;
    addresses[bufferIndex] = dataPointer(copy.ptr());
  }

  const NativeRunner &runner_;
  std::vector<py::object> &slots_;
  const CallState *state_; // null for a static program
  py::object workspace_;
};

NativeRunner::NativeRunner(std::shared_ptr<Graph> graph, OutputForm outputForm,
                           bool checkInputs)
    : outputForm_(outputForm), checkInputs_(checkInputs) {
  if (!graph)
    throw Error("native runner: no graph");
  if (outputForm_ == OutputForm::Single && graph->outputs().size() != 1)
    throw Error("native runner: a single output was asked for, but the "
                "graph has " +
                std::to_string(graph->outputs().size()));
  backend::Target target = backend::Target::forGraph(*graph);
  onGpu_ = target.kind == backend::Target::Kind::Cuda;
  gpu_ = target.device;
  device_ = target.tensorDevice();
  torchDevice_ = deviceToTorch(device_);
  runtime::Device &device = onGpu_
                                ? static_cast<runtime::Device &>(
                                      runtime::CudaDevice::get(target.device))
                                : runtime::CpuDevice::get();
  symbols_ = graph->symbols();
  compiled_ = std::make_unique<runtime::CompiledProgram>(
      backend::compileGraph(std::move(graph), target), device);
  const loop::Program &program = compiled_->program();
  size_t count = program.buffers.size();
  emptyStrided_ = TorchHandles::get().torch.attr("empty_strided");
  constants_.resize(count);
  dtypes_.resize(count);
  allocations_.resize(count);
  for (size_t b = 0; b < count; ++b) {
    const Buffer &buffer = program.buffers[b];
    dtypes_[b] = dtypeToTorch(buffer.dtype());
    if (buffer.kind == BufferKind::Constant)
      constants_[b] = constantTensor(*buffer.constant);
  }
  if (!program.isSymbolic()) {
    std::vector<TensorMeta> metas;
    for (const Buffer &buffer : program.buffers)
      metas.push_back(buffer.meta);
    allocations_ = allocationsFor(metas);
  }

  // Extern steps: operands read from buffer slots.
  externs_.resize(program.steps.size());
  resultSlots_.resize(program.steps.size());
  for (size_t s = 0; s < program.steps.size(); ++s)
    if (program.steps[s].kind == Step::Kind::Extern) {
      const Step &step = program.steps[s];
      auto tensorOperand = [&](Value *value) {
        int64_t buffer = program.operandBuffer(step, value);
        if (buffer < 0)
          throw Error("native runner: %" + value->name() +
                      " has no buffer for an extern to read");
        CallOperand operand;
        operand.slot = static_cast<int32_t>(buffer);
        return operand;
      };
      externs_[s].emplace(*step.node, tensorOperand);
      resultSlots_[s].assign(program.steps[s].results.begin(),
                             program.steps[s].results.end());
    }
  for (const loop::ProgramOutput &output : program.outputs) {
    CallOperand operand;
    if (output.buffer >= 0) {
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

std::vector<NativeRunner::Allocation>
NativeRunner::allocationsFor(const std::vector<TensorMeta> &metas) const {
  std::vector<Allocation> allocations(metas.size());
  for (int64_t b : compiled_->allocatedBuffers()) {
    const TensorMeta &meta = metas[b];
    int64_t bytes = bufferBytes(meta);
    // Large CPU outputs come from kiln's pool: a plain process's allocator
    // would give their pages back to the system on free, and every call
    // would fault them in again.
    bool pooled = !onGpu_ && bytes >= runtime::HostMemoryPool::kMinimumBytes &&
                  meta.storageOffset == 0;
    allocations[b] = {tupleOf(meta.sizes), tupleOf(meta.strides), bytes,
                      pooled};
  }
  return allocations;
}

std::vector<int64_t> NativeRunner::symbolValues(PyObject *const *inputs) const {
  static PyObject *shapeName = PyUnicode_InternFromString("shape");
  std::vector<int64_t> values;
  values.reserve(symbols_.size());
  for (const SymbolBinding &binding : symbols_) {
    // torch.Size is a tuple of ints.
    PyObject *shape = PyObject_GetAttr(inputs[binding.input], shapeName);
    if (!shape)
      throw py::error_already_set();
    py::object owned = py::reinterpret_steal<py::object>(shape);
    if (!PyTuple_Check(shape) || binding.dim >= PyTuple_GET_SIZE(shape))
      throw Error("kiln: input " + std::to_string(binding.input) +
                  " has no dim " + std::to_string(binding.dim));
    long long value = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, binding.dim));
    if (value == -1 && PyErr_Occurred())
      throw py::error_already_set();
    values.push_back(value);
  }
  return values;
}

std::shared_ptr<const NativeRunner::CallState>
NativeRunner::stateFor(std::vector<int64_t> values) const {
  {
    std::lock_guard<std::mutex> lock(statesMutex_);
    for (auto it = states_.begin(); it != states_.end(); ++it)
      if ((*it)->layout.symbols == values) {
        if (it != states_.begin())
          states_.splice(states_.begin(), states_, it);
        return states_.front();
      }
  }
  auto state = std::make_shared<CallState>();
  state->layout = runtime::CallLayout::of(program(), std::move(values));
  state->allocations = allocationsFor(state->layout.metas);
  std::lock_guard<std::mutex> lock(statesMutex_);
  states_.push_front(state);
  constexpr size_t kRecentStates = 64;
  if (states_.size() > kRecentStates)
    states_.pop_back();
  return state;
}

void NativeRunner::checkInput(size_t index, PyObject *tensor,
                              const TensorMeta &expected) const {
  if (!isTensor(tensor))
    throw py::type_error("kiln: input " + std::to_string(index) +
                         " of the compiled graph must be a tensor");
  TensorMeta actual = tensorMetaOf(tensor);
  if (actual.device != expected.device ||
      !runtime::sameLayout(actual, expected))
    throw py::value_error("kiln: input " + std::to_string(index) + " is " +
                          actual.str() + " on " + actual.device.str() +
                          ", but the graph was compiled for " + expected.str() +
                          "; compile again for these inputs");
}

py::object NativeRunner::run(PyObject *const *inputs, size_t count) const {
  return runCall(inputs, count, nullptr);
}

py::object
NativeRunner::runWithSymbols(PyObject *const *inputs, size_t count,
                             const std::vector<int64_t> &symbols) const {
  return runCall(inputs, count, &symbols);
}

py::object NativeRunner::runCall(PyObject *const *inputs, size_t count,
                                 const std::vector<int64_t> *symbols) const {
  if (count != compiled_->inputCount())
    throw py::type_error("kiln: the compiled graph takes " +
                         std::to_string(compiled_->inputCount()) +
                         " inputs, got " + std::to_string(count));
  std::shared_ptr<const CallState> state;
  if (!symbols_.empty()) {
    if (symbols && symbols->size() == symbols_.size()) {
      state = stateFor(*symbols);
    } else {
      for (const SymbolBinding &binding : symbols_)
        if (!isTensor(inputs[binding.input]))
          throw py::type_error("kiln: input " + std::to_string(binding.input) +
                               " of the compiled graph must be a tensor");
      state = stateFor(symbolValues(inputs));
    }
  }
  std::vector<py::object> slots(constants_);
  std::vector<char *> inputAddresses(count, nullptr);
  for (size_t i = 0; i < count; ++i) {
    int64_t b = compiled_->inputBuffer(i);
    if (b < 0)
      continue;
    if (checkInputs_)
      checkInput(i, inputs[i],
                 state ? state->layout.metas[b] : program().buffers[b].meta);
    slots[b] = py::reinterpret_borrow<py::object>(inputs[i]);
    inputAddresses[i] = dataPointer(inputs[i]);
  }
  TorchHost host(*this, slots, state.get());
  std::vector<char *> addresses;
  runtime::runProgram(*compiled_, inputAddresses.data(), count, host, addresses,
                      state ? &state->layout : nullptr);
  return packOutputs(outputForm_, outputs_, slots);
}

std::string NativeRunner::describe() const { return compiled_->describe(); }

} // namespace kiln::python
