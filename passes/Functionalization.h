// Rewrites in-place ops on tensors the graph made into their functional
// forms, so that they lower (and fuse) instead of calling torch.
// Depends on ir/Graph.h.
#pragma once

#include <memory>

namespace kiln {
class Graph;
}

namespace kiln::passes {

/// A copy of `graph` in which each in-place op (`relu_`, `add_`,
/// `masked_fill_`, ...) that writes a tensor the graph itself made is its
/// functional op (`relu`, `add`, `masked_fill`), and every later reader of
/// the tensor reads that op's result. Only where nothing else can see the
/// write: the tensor is an op's fresh result (not a graph input, a constant
/// or a view of anything) and no view of it is taken anywhere in the graph;
/// and the functional op, which the registry must know, gives the tensor's
/// own dtype, sizes and strides. Other in-place ops stay as they are.
/// Returns `graph` itself where nothing changes.
std::shared_ptr<Graph> functionalizeInPlaceOps(std::shared_ptr<Graph> graph);

} // namespace kiln::passes
