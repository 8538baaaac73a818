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
/// `masked_fill_`, `copy_`, ...) that writes a tensor the graph itself made,
/// or a view of one, is its functional op (`relu`, `add`, `masked_fill`,
/// `copy`), and every later reader of the tensor reads that op's result.
/// A write through a view (`y[:, 0] = v`, `y.t().relu_()`) is scattered
/// into the tensor (`as_strided_scatter` with the view's sizes, strides and
/// offset), and views read after a write are taken again of its result.
/// Only where nothing else can see the write: the tensor is an op's fresh,
/// dense result (not a graph input, a constant or a view of anything); and
/// the functional op, which the registry must know, gives the written
/// tensor's dtype and sizes (and, for the whole tensor, its strides).
/// Other in-place ops stay as they are. Returns `graph` itself where
/// nothing changes.
std::shared_ptr<Graph> functionalizeInPlaceOps(std::shared_ptr<Graph> graph);

} // namespace kiln::passes
