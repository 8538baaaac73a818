// The whole path from a graph to machine code for the CPU, as one list of
// stages: lower, fuse, order loops, plan memory, generate and JIT-compile.
// Depends on ir/, passes/, backend/cpu/CpuBackend.h.
#pragma once

#include "backend/cpu/CpuBackend.h"
#include "ir/Graph.h"
#include "ir/LoopIR.h"

#include <memory>

namespace kiln::backend {

/// A graph compiled for the CPU: its loop-IR program and the machine code of
/// its kernels (freed with this object).
struct CompiledGraph {
  loop::Program program;
  std::unique_ptr<CpuProgram> code;
  /// Milliseconds from graph to runnable code.
  double compileMilliseconds = 0;
};

/// Throws kiln::Unsupported when the graph cannot run natively (another
/// device, an op the code generator refuses); callers run it eagerly then.
std::unique_ptr<CompiledGraph>
compileGraphForCpu(std::shared_ptr<const Graph> graph);

} // namespace kiln::backend
