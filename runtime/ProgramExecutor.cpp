// The step loop of a compiled program over raw buffers, and the host of a
// run without Python. Depends on runtime/ProgramExecutor.h, ir/Error.h.
#include "runtime/ProgramExecutor.h"

#include "ir/Error.h"
#include "passes/Scheduler.h"

#include <optional>

namespace kiln::runtime {

using loop::Buffer;
using loop::BufferKind;
using loop::Step;

bool sameLayout(const TensorMeta &actual, const TensorMeta &expected) {
  if (actual.dtype != expected.dtype || actual.sizes != expected.sizes ||
      actual.strides.size() != expected.sizes.size())
    return false;
  if (expected.numel() == 0)
    return true;
  for (size_t d = 0; d < expected.sizes.size(); ++d)
    if (expected.sizes[d] > 1 && actual.strides[d] != expected.strides[d])
      return false;
  return true;
}

void checkInput(const CompiledProgram &program, size_t index,
                const TensorBuffer &tensor, const CallLayout *layout) {
  if (index >= program.inputCount())
    throw Error("the compiled program takes " +
                std::to_string(program.inputCount()) +
                " inputs; there is no "
                "input " +
                std::to_string(index));
  int64_t bufferIndex = program.inputBuffer(index);
  if (bufferIndex < 0)
    return;
  const TensorMeta &expected =
      layout ? layout->metas[bufferIndex]
             : program.program().buffers[bufferIndex].meta;
  TensorMeta actual;
  actual.dtype = tensor.dtype;
  actual.sizes = tensor.sizes;
  actual.strides = tensor.strides;
  bool same = sameLayout(actual, expected);
  if (same && !tensor.data && expected.numel() != 0)
    throw Error("input " + std::to_string(index) + " has no data");
  if (!same)
    throw Error("input " + std::to_string(index) + " is " + actual.str() +
                ", but the program was compiled for " + expected.str());
}

namespace {

// Raises what torch's op raises (check.report; IndexOutOfRange) where an
// element of the index tensor in the buffer at `data` (laid out as
// `check.elements`, from its storage offset on; int64 or int32) lies
// outside [0, size) (or [-size, size) where check.fromEnd) and is not
// check.ignored.
void checkIndicesInRange(const char *data, const loop::IndexCheck &check) {
  using Report = loop::IndexCheck::Report;
  const TensorMeta &meta = check.elements;
  const int64_t size = check.size;
  const int64_t least = check.fromEnd ? -size : 0;
  if (meta.numel() == 0)
    return;
  if (meta.dtype != DType::Int64 && meta.dtype != DType::Int32)
    throw Error("an index check of a " + meta.str() + " input");
  size_t rank = meta.sizes.size();
  std::vector<int64_t> position(rank, 0);
  int64_t itemBytes = itemSize(meta.dtype);
  data += meta.storageOffset * itemBytes;
  for (int64_t element = 0, count = meta.numel(); element < count; ++element) {
    int64_t offset = 0;
    for (size_t d = 0; d < rank; ++d)
      offset += position[d] * meta.strides[d];
    const char *at = data + offset * itemBytes;
    int64_t value = meta.dtype == DType::Int64
                        ? *reinterpret_cast<const int64_t *>(at)
                        : *reinterpret_cast<const int32_t *>(at);
    if ((value < least || value >= size) && value != check.ignored) {
      std::string bounds = "index " + std::to_string(value) +
                           " is out of bounds for dimension " +
                           std::to_string(check.dim) + " with size " +
                           std::to_string(size);
      switch (check.report) {
      case Report::Table:
        throw IndexOutOfRange("index out of range in self", check.origin);
      case Report::Indexing:
        throw IndexOutOfRange(bounds, check.origin);
      case Report::Gather:
        throw IndexOutOfRange(bounds, check.origin, /*indexError=*/false);
      case Report::Target:
        throw IndexOutOfRange("Target " + std::to_string(value) +
                                  " is out of bounds.",
                              check.origin);
      }
    }
    for (size_t d = rank; d-- > 0;) {
      if (++position[d] < meta.sizes[d])
        break;
      position[d] = 0;
    }
  }
}

} // namespace

CallLayout CallLayout::of(const loop::Program &program,
                          std::vector<int64_t> symbols) {
  if (symbols.size() != program.symbolHints.size())
    throw Error("the compiled program has " +
                std::to_string(program.symbolHints.size()) +
                " size symbols; the call gives " +
                std::to_string(symbols.size()) + " values");
  CallLayout layout;
  std::vector<int64_t> bytes;
  for (const Buffer &buffer : program.buffers) {
    layout.metas.push_back(buffer.meta.isSymbolic()
                               ? buffer.meta.specialized(symbols)
                               : buffer.meta);
    bytes.push_back(bufferBytes(layout.metas.back()));
  }
  layout.workspaceOffsets =
      planWorkspace(program, bytes, layout.workspaceBytes);
  layout.symbols = std::move(symbols);
  return layout;
}

char *ExecutionHost::constantAddress(int64_t buffer) {
  // Kernels only read constants.
  return reinterpret_cast<char *>(const_cast<uint8_t *>(
      program_.program().buffers[buffer].constant->bytes.data()));
}

Workspace ExecutionHost::workspace(int64_t bytes) {
  return program_.device().workspace(bytes);
}

void runProgram(const CompiledProgram &compiled, char *const *inputAddresses,
                size_t inputCount, ExecutionHost &host,
                std::vector<char *> &addresses, const CallLayout *layout) {
  const loop::Program &program = compiled.program();
  if (program.isSymbolic() && !layout)
    throw Error("the compiled program's sizes vary between calls; a call "
                "must give its sizes");
  if (inputCount != compiled.inputCount())
    throw Error("the compiled program takes " +
                std::to_string(compiled.inputCount()) + " inputs, got " +
                std::to_string(inputCount));
  size_t bufferCount = program.buffers.size();
  addresses.assign(bufferCount, nullptr);
  for (size_t i = 0; i < inputCount; ++i)
    if (int64_t b = compiled.inputBuffer(i); b >= 0)
      addresses[b] = inputAddresses[i];
  for (size_t b = 0; b < bufferCount; ++b)
    if (program.buffers[b].kind == BufferKind::Constant)
      addresses[b] = host.constantAddress(static_cast<int64_t>(b));
  for (int64_t b : compiled.allocatedBuffers())
    addresses[b] = host.allocate(b);
  Workspace workspace =
      host.workspace(layout ? layout->workspaceBytes : program.workspaceBytes);
  backend::LaunchContext context = host.launchContext();
  if (layout)
    context.symbols = &layout->symbols;
  for (size_t b = 0; b < bufferCount; ++b)
    if (program.buffers[b].kind == BufferKind::Temporary)
      addresses[b] =
          workspace.data() + (layout ? layout->workspaceOffsets[b]
                                     : program.buffers[b].workspaceOffset);

  auto readyViews = [&](int64_t afterStep) {
    for (int64_t view : compiled.viewsReadyAfter(afterStep)) {
      const Buffer &buffer = program.buffers[view];
      int64_t offset = layout ? layout->metas[view].storageOffset
                              : buffer.meta.storageOffset;
      addresses[view] =
          addresses[buffer.base] + offset * itemSize(buffer.dtype());
      host.viewReady(view, addresses);
    }
  };
  readyViews(-1);
  StepProfile *profile = compiled.profile();
  for (size_t s = 0; s < program.steps.size(); ++s) {
    for (const loop::IndexCheck &check : compiled.checksBefore(s))
      checkIndicesInRange(addresses[check.buffer], check);
    StepProfile::Mark start;
    if (profile)
      start = StepProfile::now();
    if (program.steps[s].kind == Step::Kind::Kernel) {
      compiled.code().runKernel(s, addresses.data(), context);
    } else {
      host.runExtern(s, addresses);
      readyViews(static_cast<int64_t>(s));
    }
    for (int64_t buffer : compiled.releasedAfter(s))
      host.release(buffer);
    if (profile)
      profile->record(s, start);
  }
}

namespace {

/// Outputs on the program's device, and no extern calls.
class StandaloneHost : public ExecutionHost {
public:
  StandaloneHost(const CompiledProgram &program, const CallLayout *layout)
      : ExecutionHost(program), layout_(layout) {}

  char *allocate(int64_t buffer) override {
    Device &device = program_.device();
    char *memory = device.allocate(
        layout_ ? bufferBytes(layout_->metas[buffer])
                : bufferBytes(program_.program().buffers[buffer]));
    memory_.emplace_back(memory, [&device](char *m) { device.deallocate(m); });
    return memory;
  }
  void runExtern(size_t step, std::vector<char *> &) override {
    const Node *node = program_.program().steps[step].node;
    throw Unsupported("the compiled program calls " +
                      node->schema()->qualifiedName() +
                      ", which kiln does not compile; it needs a host that "
                      "runs extern calls (the Python bridge calls torch)");
  }

  std::vector<std::shared_ptr<char>> memory_;
  const CallLayout *layout_;
};

} // namespace

ProgramOutputs runProgram(const CompiledProgram &compiled,
                          const std::vector<TensorBuffer> &inputs) {
  const loop::Program &program = compiled.program();
  for (const Step &step : program.steps)
    if (step.kind == Step::Kind::Extern)
      throw Unsupported("the compiled program calls " +
                        step.node->schema()->qualifiedName() +
                        ", which kiln does not compile; it needs a host "
                        "that runs extern calls (the Python bridge calls "
                        "torch)");
  for (const loop::ProgramOutput &output : program.outputs)
    if (output.buffer < 0)
      throw Unsupported("the compiled program returns a non-tensor value");
  if (inputs.size() != compiled.inputCount())
    throw Error("the compiled program takes " +
                std::to_string(compiled.inputCount()) + " inputs, got " +
                std::to_string(inputs.size()));
  // A program whose sizes vary reads its symbols from the inputs' sizes.
  std::optional<CallLayout> layout;
  if (program.isSymbolic()) {
    std::vector<int64_t> symbols;
    for (const SymbolBinding &binding : program.graph->symbols()) {
      const TensorBuffer &input = inputs.at(binding.input);
      if (binding.dim >= static_cast<int64_t>(input.sizes.size()))
        throw Error("input " + std::to_string(binding.input) + " has " +
                    std::to_string(input.sizes.size()) +
                    " dims; the program reads the size of dim " +
                    std::to_string(binding.dim));
      symbols.push_back(input.sizes[binding.dim]);
    }
    layout = CallLayout::of(program, std::move(symbols));
  }
  std::vector<char *> inputAddresses;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkInput(compiled, i, inputs[i], layout ? &*layout : nullptr);
    inputAddresses.push_back(inputs[i].data);
  }
  StandaloneHost host(compiled, layout ? &*layout : nullptr);
  std::vector<char *> addresses;
  runProgram(compiled, inputAddresses.data(), inputAddresses.size(), host,
             addresses, layout ? &*layout : nullptr);
  ProgramOutputs outputs;
  for (const loop::ProgramOutput &output : program.outputs) {
    const Buffer &buffer = program.buffers[output.buffer];
    const TensorMeta &meta =
        layout ? layout->metas[output.buffer] : buffer.meta;
    outputs.tensors.push_back(
        {addresses[output.buffer], buffer.dtype(), meta.sizes, meta.strides});
  }
  outputs.memory = std::move(host.memory_);
  return outputs;
}

} // namespace kiln::runtime
