// Lowering: turns the graph IR into loop IR, one unfused kernel per realized
// value and an extern step for every op without a native lowering.
// Depends on ir/Graph.h and ir/LoopIR.h.
#pragma once

#include "ir/LoopIR.h"

#include <memory>

namespace kiln {

/// Lowers `graph` to loop IR: one unfused kernel per realized value (a later
/// scheduler pass merges kernels), extern steps for everything else, buffers
/// and outputs, for tensors on `device`. Throws kiln::Unsupported where the
/// whole graph cannot be compiled natively (a tensor on another device; the
/// caller then runs the graph eagerly). A `standalone` program runs without
/// torch (ahead-of-time export): every op a lowering can compile is compiled,
/// whatever calling torch would save.
loop::Program lowerGraph(std::shared_ptr<const Graph> graph,
                         const Device &device = Device{},
                         bool standalone = false);

} // namespace kiln
