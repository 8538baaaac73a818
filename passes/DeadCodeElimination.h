// Removes graph nodes whose results nothing reads.
// Depends on ir/Graph.h.
#pragma once

namespace kiln {
class Graph;
}

namespace kiln::passes {

/// Erases op, extern and constant nodes that no output depends on. Nodes
/// that write an argument (in-place and out= ops) or return nothing are side
/// effects and stay.
/// Returns the number of nodes erased.
int eliminateDeadCode(Graph &graph);

} // namespace kiln::passes
