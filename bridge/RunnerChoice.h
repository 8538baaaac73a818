// The one place that decides how a captured graph runs: natively (kiln's
// compiled code, externs through torch) or through torch's operators.
// Both frontends (bytecode capture, torch.compile's FX graphs) use it.
// Depends on bridge/GraphRunner.h, bridge/PythonConversion.h, ir/Graph.h.
#pragma once

#include "bridge/GraphRunner.h"
#include "bridge/PythonConversion.h"
#include "ir/Graph.h"

#include <memory>
#include <string>

namespace kiln::python {

/// A runner for `graph` (cleaned up in place): the native one when
/// `backend` is "llvm", `eagerReason` is empty and the graph compiles; the
/// eager one otherwise, the reason logged to KILN_LOGS=breaks under `name`.
/// A compiler error never escapes: the graph runs through torch instead.
/// With `checkInputs`, a native runner checks every call's tensors against
/// the graph's layouts (for callers that do not guard them). `mode`
/// "reduce-overhead" replays a GPU graph's work as a CUDA graph where it
/// can (bridge/CudaGraphRunner.h), the reason logged where it cannot.
std::unique_ptr<GraphRunner>
chooseGraphRunner(std::shared_ptr<Graph> graph, OutputForm outputForm,
                  const std::string &backend, std::string eagerReason,
                  const std::string &name, bool checkInputs,
                  const std::string &mode = "default");

} // namespace kiln::python
