// Lowering: turns the graph IR into loop IR, one unfused kernel per realized
// value and an extern step for every op without a native lowering.
// Depends on ir/Graph.h and ir/LoopIR.h.
#pragma once

#include "ir/LoopIR.h"

#include <memory>

namespace kiln {

/// Lowers `graph` to loop IR: one unfused kernel per realized value (a later
/// scheduler pass merges kernels), extern steps for everything else, buffers
/// and outputs. Throws kiln::Unsupported where the whole graph cannot be
/// compiled natively (a non-CPU device anywhere; the caller then runs the
/// graph eagerly).
loop::Program lowerGraph(std::shared_ptr<const Graph> graph);

} // namespace kiln
