// The step loop of a compiled program over raw buffers, and the host of a
// run without Python. Depends on runtime/ProgramExecutor.h, ir/Error.h.
#include "runtime/ProgramExecutor.h"

#include "ir/Error.h"
#include "passes/Scheduler.h"

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
                const TensorBuffer &tensor) {
  if (index >= program.inputCount())
    throw Error("the compiled program takes " +
                std::to_string(program.inputCount()) +
                " inputs; there is no "
                "input " +
                std::to_string(index));
  int64_t bufferIndex = program.inputBuffer(index);
  if (bufferIndex < 0)
    return;
  const TensorMeta &expected = program.program().buffers[bufferIndex].meta;
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
                std::vector<char *> &addresses) {
  const loop::Program &program = compiled.program();
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
  Workspace workspace = host.workspace(program.workspaceBytes);
  backend::LaunchContext context = host.launchContext();
  for (size_t b = 0; b < bufferCount; ++b)
    if (program.buffers[b].kind == BufferKind::Temporary)
      addresses[b] = workspace.data() + program.buffers[b].workspaceOffset;

  auto readyViews = [&](int64_t afterStep) {
    for (int64_t view : compiled.viewsReadyAfter(afterStep)) {
      const Buffer &buffer = program.buffers[view];
      addresses[view] = addresses[buffer.base] +
                        buffer.meta.storageOffset * itemSize(buffer.dtype());
      host.viewReady(view, addresses);
    }
  };
  readyViews(-1);
  for (size_t s = 0; s < program.steps.size(); ++s) {
    if (program.steps[s].kind == Step::Kind::Kernel) {
      compiled.code().runKernel(s, addresses.data(), context);
      continue;
    }
    host.runExtern(s, addresses);
    readyViews(static_cast<int64_t>(s));
  }
}

namespace {

/// Outputs on the program's device, and no extern calls.
class StandaloneHost : public ExecutionHost {
public:
  explicit StandaloneHost(const CompiledProgram &program)
      : ExecutionHost(program) {}

  char *allocate(int64_t buffer) override {
    Device &device = program_.device();
    char *memory =
        device.allocate(bufferBytes(program_.program().buffers[buffer]));
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
  std::vector<char *> inputAddresses;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkInput(compiled, i, inputs[i]);
    inputAddresses.push_back(inputs[i].data);
  }
  StandaloneHost host(compiled);
  std::vector<char *> addresses;
  runProgram(compiled, inputAddresses.data(), inputAddresses.size(), host,
             addresses);
  ProgramOutputs outputs;
  for (const loop::ProgramOutput &output : program.outputs) {
    const Buffer &buffer = program.buffers[output.buffer];
    outputs.tensors.push_back({addresses[output.buffer], buffer.dtype(),
                               buffer.meta.sizes, buffer.meta.strides});
  }
  outputs.memory = std::move(host.memory_);
  return outputs;
}

} // namespace kiln::runtime
