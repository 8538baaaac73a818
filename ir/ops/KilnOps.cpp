// kiln's own ops: operations a captured program needs that ATen does not
// model, like switching grad mode inside a `with torch.no_grad()` block.
// Depends on ir/OpRegistry.h.
#include "ir/OpRegistry.h"

namespace kiln {

void registerKilnOps(OpRegistry &registry) {
  registry.add({"kiln::set_grad_enabled(bool enabled) -> ()",
                [](const MetaArgs &) { return std::vector<TensorMeta>(); }});
}

} // namespace kiln
