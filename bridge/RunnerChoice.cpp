// How a captured graph runs, decided once for both frontends.
// Depends on bridge/, backend/Pipeline.h, ir/.
#include "bridge/RunnerChoice.h"

#include "backend/Pipeline.h"
#include "bridge/CudaGraphRunner.h"
#include "bridge/EagerRunner.h"
#include "bridge/NativeRunner.h"
#include "ir/Error.h"
#include "ir/Logging.h"

namespace kiln::python {

namespace {

// Wraps `runner` for mode="reduce-overhead" where `graph` can be replayed.
std::unique_ptr<GraphRunner> forMode(std::unique_ptr<GraphRunner> runner,
                                     const Graph &graph,
                                     const std::string &mode,
                                     const std::string &name) {
  if (mode != "reduce-overhead")
    return runner;
  backend::Target target = backend::Target::forGraph(graph);
  if (target.kind != backend::Target::Kind::Cuda)
    return runner; // nothing to replay on the CPU: calls are already cheap
  std::string refusal = cudaGraphRefusal(graph);
  if (!refusal.empty()) {
    if (logEnabled("breaks"))
      logArtifact("breaks",
                  name + " is not replayed as a CUDA graph: " + refusal);
    return runner;
  }
  return std::make_unique<CudaGraphRunner>(std::move(runner), name,
                                           target.device);
}

} // namespace

std::unique_ptr<GraphRunner>
chooseGraphRunner(std::shared_ptr<Graph> graph, OutputForm outputForm,
                  const std::string &backend, std::string eagerReason,
                  const std::string &name, bool checkInputs,
                  const std::string &mode) {
  if (mode != "default" && mode != "reduce-overhead" && mode != "max-autotune")
    throw py::value_error("kiln: unknown mode '" + mode +
                          "'; valid modes are 'default', 'reduce-overhead' "
                          "and 'max-autotune'");
  std::shared_ptr<const Graph> whole = graph;
  if (backend != "llvm")
    eagerReason = "backend '" + backend + "' was asked for";
  if (eagerReason.empty()) {
    try {
      return forMode(
          std::make_unique<NativeRunner>(graph, outputForm, checkInputs),
          *whole, mode, name);
    } catch (const Unsupported &error) {
      eagerReason = error.what();
    } catch (const Error &error) {
      // A compiler bug must not break the user's program: torch runs it.
      eagerReason = std::string("internal error: ") + error.what();
    }
  } else {
    backend::cleanUpGraph(*graph);
  }
  if (backend == "llvm" && logEnabled("breaks"))
    logArtifact("breaks",
                name + " runs through torch's operators: " + eagerReason);
  return forMode(std::make_unique<EagerRunner>(std::move(graph), outputForm),
                 *whole, mode, name);
}

} // namespace kiln::python
