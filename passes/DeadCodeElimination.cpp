// Removes graph nodes whose results nothing reads: walks from the outputs
// (and side-effecting nodes) backwards, marking what is live.
// Depends on ir/Graph.h.
#include "passes/DeadCodeElimination.h"

#include "ir/Graph.h"

#include <unordered_set>

namespace kiln::passes {

int eliminateDeadCode(Graph &graph) {
  std::unordered_set<const Node *> live;
  auto markLive = [&](const Node *node) { live.insert(node); };
  for (const Argument &output : graph.outputs()) {
    if (output.isTensor())
      markLive(output.toTensor()->producer());
    else if (output.isTensorList())
      for (Value *value : output.toTensorList())
        if (value)
          markLive(value->producer());
  }
  const auto &nodes = graph.nodes();
  // Nodes are in execution order, so one backward sweep sees every reader
  // of a node before the node itself.
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    const Node &node = **it;
    // Writes to an argument, and ops that return nothing (grad mode
    // changes), exist for their effect.
    bool sideEffect = node.writesArguments() ||
                      (node.schema() && node.schema()->returns.empty());
    if (sideEffect)
      markLive(&node);
    if (!live.count(&node))
      continue;
    for (Value *operand : node.operands())
      markLive(operand->producer());
  }
  int erased = 0;
  graph.eraseNodes([&](const Node &node) {
    bool dead = !live.count(&node);
    erased += dead;
    return dead;
  });
  return erased;
}

} // namespace kiln::passes
