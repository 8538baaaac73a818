// Works out once what every call of a compiled program needs.
// Depends on runtime/CompiledProgram.h, ir/Error.h.
#include "runtime/CompiledProgram.h"

#include "ir/Error.h"
#include "ir/Logging.h"

#include <algorithm>
#include <limits>
#include <sstream>

namespace kiln::runtime {

using loop::Buffer;
using loop::BufferKind;
using loop::Step;

CompiledProgram::CompiledProgram(
    std::unique_ptr<backend::CompiledGraph> compiled, Device &device)
    : compiled_(std::move(compiled)), device_(device) {
  if (!compiled_ || !compiled_->code)
    throw Error("compiled program: no code");
  const loop::Program &program = compiled_->program;
  size_t count = program.buffers.size();
  inputBuffers_.assign(program.graph ? program.graph->inputs().size() : 0, -1);
  viewsReadyAfter_.resize(program.steps.size() + 1);
  resultsReadByKernels_.resize(program.steps.size());
  viewLeavesKernels_.assign(count, false);
  // A GPU step's host time is its launch's: only CPU programs are timed.
  if (logEnabled("profile") && device.name() == "cpu")
    profile_ = StepProfile::create(program);

  std::vector<int64_t> producedBy(count, -1);
  for (size_t s = 0; s < program.steps.size(); ++s)
    for (int64_t result : program.steps[s].results)
      producedBy[result] = static_cast<int64_t>(s);

  for (size_t b = 0; b < count; ++b) {
    const Buffer &buffer = program.buffers[b];
    switch (buffer.kind) {
    case BufferKind::Input:
      if (buffer.graphInput < 0 ||
          buffer.graphInput >= static_cast<int64_t>(inputBuffers_.size()))
        throw Error("compiled program: buffer " + buffer.name +
                    " names no graph input");
      inputBuffers_[buffer.graphInput] = static_cast<int64_t>(b);
      break;
    case BufferKind::Constant:
      if (!buffer.constant)
        throw Error("compiled program: constant " + buffer.name +
                    " has no data");
      break;
    case BufferKind::Tensor:
      if (producedBy[b] < 0)
        allocatedBuffers_.push_back(static_cast<int64_t>(b));
      break;
    case BufferKind::View: {
      int64_t root = program.rootOf(buffer.base);
      viewsReadyAfter_[producedBy[root] + 1].push_back(static_cast<int64_t>(b));
      break;
    }
    case BufferKind::Temporary:
      break;
    }
  }

  auto leavesKernels = [&](int64_t buffer, const char *reader) {
    const Buffer &read = program.buffers[buffer];
    if (read.kind == BufferKind::Temporary)
      throw Error(std::string("compiled program: ") + reader +
                  " reads temporary " + read.name);
    if (read.kind == BufferKind::View)
      viewLeavesKernels_[buffer] = true;
  };
  std::vector<bool> readByKernel(count, false);
  for (const Step &step : program.steps) {
    if (step.kind == Step::Kind::Kernel) {
      loop::forEachExpr(step.kernel, [&](const loop::Expr *expr) {
        for (const loop::Expr *load : loop::loadsOf(expr))
          readByKernel[load->id()] = true;
      });
      continue;
    }
    for (Value *operand : step.node->operands()) {
      int64_t buffer = program.operandBuffer(step, operand);
      if (buffer < 0)
        throw Error("compiled program: %" + operand->name() +
                    " has no buffer for an extern to read");
      leavesKernels(buffer, "an extern");
    }
  }
  for (size_t b = 0; b < count; ++b)
    if (readByKernel[b] && program.buffers[b].kind == BufferKind::View)
      readByKernel[program.buffers[b].base] = true;
  for (size_t s = 0; s < program.steps.size(); ++s)
    for (int64_t result : program.steps[s].results)
      if (readByKernel[result])
        resultsReadByKernels_[s].push_back(result);
  for (const loop::ProgramOutput &output : program.outputs)
    if (output.buffer >= 0)
      leavesKernels(output.buffer, "an output");
  planReleases();
  planIndexChecks();
}

namespace {

// Calls `read` with each buffer `step` reads: an extern's operands (-1
// where one has none) or a kernel's loads.
void forEachRead(const loop::Program &program, const Step &step,
                 const std::function<void(int64_t)> &read) {
  if (step.kind == Step::Kind::Extern) {
    for (Value *operand : step.node->operands())
      read(program.operandBuffer(step, operand));
    return;
  }
  loop::forEachExpr(step.kernel, [&](const loop::Expr *expr) {
    for (const loop::Expr *load : loop::loadsOf(expr))
      read(load->id());
  });
}

} // namespace

void CompiledProgram::planIndexChecks() {
  const loop::Program &program = compiled_->program;
  checksBefore_.resize(program.steps.size());
  for (const loop::IndexCheck &check : program.indexChecks) {
    size_t first = 0;
    for (size_t s = 0; s < program.steps.size(); ++s) {
      bool reads = false;
      forEachRead(program, program.steps[s], [&](int64_t buffer) {
        reads =
            reads || (buffer >= 0 && program.rootOf(buffer) == check.buffer);
      });
      if (reads) {
        first = s;
        break;
      }
    }
    if (!program.steps.empty())
      checksBefore_[first].push_back(check);
  }
}

void CompiledProgram::planReleases() {
  const loop::Program &program = compiled_->program;
  size_t count = program.buffers.size();
  releasedAfter_.resize(program.steps.size());
  // The last step that reads or writes each memory (a root buffer); memory
  // an output names, or that the caller owns, is never released.
  constexpr int64_t kKept = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> lastUse(count, -1);
  auto use = [&](int64_t buffer, size_t step) {
    int64_t &last = lastUse[program.rootOf(buffer)];
    if (last != kKept)
      last = std::max(last, static_cast<int64_t>(step));
  };
  for (size_t b = 0; b < count; ++b) {
    BufferKind kind = program.buffers[b].kind;
    if (kind == BufferKind::Input || kind == BufferKind::Constant ||
        kind == BufferKind::Temporary)
      lastUse[b] = kKept;
  }
  for (const loop::ProgramOutput &output : program.outputs)
    if (output.buffer >= 0)
      lastUse[program.rootOf(output.buffer)] = kKept;
  for (size_t s = 0; s < program.steps.size(); ++s) {
    const Step &step = program.steps[s];
    forEachRead(program, step, [&](int64_t buffer) { use(buffer, s); });
    if (step.kind == Step::Kind::Extern) {
      for (int64_t result : step.results)
        use(result, s);
      continue;
    }
    for (const loop::Loop &loop : step.kernel.loops)
      for (const loop::Store &store : loop.stores)
        use(store.buffer, s);
  }
  for (size_t b = 0; b < count; ++b) {
    BufferKind kind = program.buffers[b].kind;
    if (kind != BufferKind::Tensor && kind != BufferKind::View)
      continue;
    int64_t last = lastUse[program.rootOf(static_cast<int64_t>(b))];
    if (last >= 0 && last != kKept)
      releasedAfter_[last].push_back(static_cast<int64_t>(b));
  }
}

std::string CompiledProgram::describe() const {
  int kernels = 0;
  std::vector<std::string> externs;
  for (const Step &step : program().steps) {
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

} // namespace kiln::runtime
