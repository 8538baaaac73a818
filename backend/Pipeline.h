// The whole path from a graph to machine code, as one list of stages for a
// target: graph clean-up, lowering, index simplification, fusion, loop
// order, memory planning, the target's schedule, code generation.
// Depends on ir/, passes/, backend/KernelCode.h.
#pragma once

#include "backend/KernelCode.h"
#include "ir/Graph.h"
#include "ir/LoopIR.h"

#include <memory>
#include <string>

namespace kiln::backend {

/// What a program is compiled for: the host CPU, or an NVIDIA GPU (PTX
/// through LLVM's NVPTX target, run through the CUDA driver).
struct Target {
  enum class Kind : uint8_t { Cpu, Cuda } kind = Kind::Cpu;
  int device = -1; // Cuda: the GPU's ordinal
  /// Code that runs without torch (ahead-of-time export): no extern steps.
  bool standalone = false;

  /// The target of the device the graph's tensors live on: the first GPU
  /// among its inputs', else the CPU. Nodes on another device than the
  /// target's run as torch calls.
  static Target forGraph(const Graph &graph);
  /// The device tensors of a program for this target live on.
  Device tensorDevice() const;
  std::string name() const;
};

/// A graph compiled for a target: its loop-IR program and the machine code
/// of its kernels (freed with this object).
struct CompiledGraph {
  loop::Program program;
  std::unique_ptr<KernelCode> code;
  Target target;
  /// Milliseconds from graph to runnable code.
  double compileMilliseconds = 0;
};

/// Graph clean-up: removes what no output or side effect needs. The first
/// stage of compileGraph; a graph that runs through torch instead gets it
/// here.
void cleanUpGraph(Graph &graph);

/// The stages every target shares, in order: graph clean-up (in place),
/// lowering for the target's device, index simplification, fusion, loop
/// order, memory planning. Throws kiln::Unsupported as compileGraph does.
loop::Program planProgram(std::shared_ptr<Graph> graph, const Target &target);

/// Compiles `graph` (cleaned up in place first) for `target`: the shared
/// stages (planProgram), then the target's schedule and code generation. Throws
/// kiln::Unsupported when the graph cannot run natively (an op or dtype the
/// code generator refuses); callers run it through torch then.
std::unique_ptr<CompiledGraph> compileGraph(std::shared_ptr<Graph> graph,
                                            const Target &target);

} // namespace kiln::backend
