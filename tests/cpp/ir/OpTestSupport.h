// Helpers shared by the op meta-function tests.
// Depends on ir/Graph.h.
#pragma once

#include "ir/Graph.h"

#include <string_view>
#include <vector>

namespace kiln::testing {

/// Adds `op` to `graph` and returns the metadata of all its results.
inline std::vector<TensorMeta>
resultsOf(Graph &graph, std::string_view op,
          const std::vector<Argument> &arguments) {
  std::vector<TensorMeta> metas;
  for (const auto &value : graph.addOp(op, arguments)->results())
    metas.push_back(value->meta());
  return metas;
}

} // namespace kiln::testing
