// The whole path from a graph to machine code for the CPU, as one list of
// stages, each followed by the log that shows its result.
// Depends on ir/, passes/, backend/cpu/CpuBackend.h.
#include "backend/CompileGraph.h"

#include "ir/Logging.h"
#include "passes/Lowering.h"
#include "passes/Scheduler.h"

#include <chrono>

namespace kiln::backend {

std::unique_ptr<CompiledGraph>
compileGraphForCpu(std::shared_ptr<const Graph> graph) {
  auto start = std::chrono::steady_clock::now();
  auto compiled = std::make_unique<CompiledGraph>();
  loop::Program &program = compiled->program;

  program = lowerGraph(std::move(graph));
  if (logEnabled("loop_ir"))
    logArtifact("loop_ir", "after lowering\n" + program.str());

  simplifyIndices(program);
  fuseKernels(program);
  chooseLoopOrder(program);
  simplifyIndices(program); // coalesced and dropped loops change the ranges
  // Kernels whose domains only now agree (a reduction over [2, 8, 256]
  // coalesced to [16, 256], and its epilogue over a [16, 256, 256] view)
  // fuse on the second try.
  fuseKernels(program);
  planMemory(program);
  if (logEnabled("schedule"))
    logArtifact("schedule", scheduleSummary(program));
  if (logEnabled("loop_ir"))
    logArtifact("loop_ir", "after scheduling\n" + program.str());

  compiled->code = CpuProgram::compile(program);

  compiled->compileMilliseconds = std::chrono::duration<double, std::milli>(
                                      std::chrono::steady_clock::now() - start)
                                      .count();
  return compiled;
}

} // namespace kiln::backend
