// The whole path from a graph to machine code, as one list of stages, each
// followed by the log that shows its result (KILN_LOGS=graph,loop_ir,
// schedule; +loop_ir prints the loop IR after every stage).
// Depends on ir/, passes/, backend/cpu/, backend/cuda/CudaCompile.h.
#include "backend/Pipeline.h"

#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/CpuSchedule.h"
#include "backend/cpu/HostTarget.h"
#include "backend/cuda/CudaCompile.h"
#include "backend/nvptx/GpuSchedule.h"
#include "ir/Logging.h"
#include "passes/DeadCodeElimination.h"
#include "passes/Functionalization.h"
#include "passes/Lowering.h"
#include "passes/Scheduler.h"

#include <chrono>

namespace kiln::backend {

namespace {

void logLoopIr(const loop::Program &program, const char *stage, bool main) {
  if (logEnabled("loop_ir") && (main || logVerbose("loop_ir")))
    logArtifact("loop_ir",
                std::string("after ") + stage + "\n" + program.str());
}

/// The CPU's machine code as the runtime runs it.
class CpuKernelCode : public KernelCode {
public:
  explicit CpuKernelCode(std::unique_ptr<CpuProgram> program)
      : program_(std::move(program)) {}
  void runKernel(size_t stepIndex, char *const *buffers,
                 const LaunchContext &context) const override {
    program_->runKernel(stepIndex, buffers, context.symbols);
  }

private:
  std::unique_ptr<CpuProgram> program_;
};

} // namespace

Target Target::forGraph(const Graph &graph) {
  Target target;
  for (const Value *input : graph.inputs())
    if (input->meta().device.type == DeviceType::CUDA) {
      target.kind = Kind::Cuda;
      target.device = std::max(input->meta().device.index, 0);
      break;
    }
  return target;
}

Device Target::tensorDevice() const {
  if (kind == Kind::Cuda)
    return Device{DeviceType::CUDA, device};
  return Device{};
}

std::string Target::name() const {
  switch (kind) {
  case Kind::Cpu:
    return "cpu";
  case Kind::Cuda:
    return "cuda:" + std::to_string(device);
  }
  return "unknown";
}

void cleanUpGraph(Graph &graph) { passes::eliminateDeadCode(graph); }

loop::Program planProgram(std::shared_ptr<Graph> graph, const Target &target) {
  PhaseTimes times("planning (" + std::to_string(graph->nodes().size()) +
                   " graph nodes)");
  graph = passes::functionalizeInPlaceOps(std::move(graph));
  times.lap("functionalization");
  cleanUpGraph(*graph);
  times.lap("dead code elimination");
  if (logVerbose("graph"))
    logArtifact("graph", "after clean-up\n" + graph->str());

  loop::Program program =
      lowerGraph(std::move(graph), target.tensorDevice(), target.standalone);
  times.lap("lowering");
  logLoopIr(program, "lowering", true);

  simplifyIndices(program);
  times.lap("index simplification");
  logLoopIr(program, "index simplification", false);
  chooseOperandLayouts(program);
  times.lap("operand layouts");
  fuseKernels(program, target.kind == Target::Kind::Cpu);
  times.lap("fusion");
  logLoopIr(program, "fusion", false);
  chooseLoopOrder(program, target.kind == Target::Kind::Cpu);
  times.lap("loop order");
  logLoopIr(program, "loop order", false);
  simplifyIndices(program); // coalesced and dropped loops change the ranges
  times.lap("index simplification");
  // Kernels whose domains only now agree (a reduction over [2, 8, 256]
  // coalesced to [16, 256], and its epilogue over a [16, 256, 256] view)
  // fuse on the second try.
  fuseKernels(program, target.kind == Target::Kind::Cpu);
  times.lap("second fusion");
  logLoopIr(program, "second fusion", false);
  if (target.kind == Target::Kind::Cpu) {
    writeOverDeadExternResults(program);
    times.lap("results written in place");
  }
  planMemory(program);
  times.lap("memory planning");
  logLoopIr(program, "memory planning", true);
  times.log();
  return program;
}

std::unique_ptr<CompiledGraph> compileGraph(std::shared_ptr<Graph> graph,
                                            const Target &target) {
  auto start = std::chrono::steady_clock::now();
  auto compiled = std::make_unique<CompiledGraph>();
  compiled->target = target;
  loop::Program &program = compiled->program;

  program = planProgram(std::move(graph), target);

  switch (target.kind) {
  case Target::Kind::Cpu: {
    if (splitReductionsForCpu(program, numThreads())) {
      planMemory(program); // the partials are temporaries
      logLoopIr(program, "split reductions", true);
    }
    CpuSchedule schedule = scheduleForCpu(program, hostTarget());
    if (logEnabled("schedule"))
      logArtifact("schedule", scheduleSummary(program) + schedule.str());
    compiled->code =
        std::make_unique<CpuKernelCode>(CpuProgram::compile(program, schedule));
    break;
  }
  case Target::Kind::Cuda:
    if (splitReductionsForGpu(program)) {
      planMemory(program); // the partials are temporaries
      logLoopIr(program, "split reductions", true);
    }
    compiled->code = compileForCuda(program, target.device);
    break;
  }

  compiled->compileMilliseconds = std::chrono::duration<double, std::milli>(
                                      std::chrono::steady_clock::now() - start)
                                      .count();
  return compiled;
}

} // namespace kiln::backend
