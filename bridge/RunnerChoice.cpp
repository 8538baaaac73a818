// How a captured graph runs, decided once for both frontends.
// Depends on bridge/, backend/Pipeline.h, ir/.
#include "bridge/RunnerChoice.h"

#include "backend/Pipeline.h"
#include "bridge/EagerRunner.h"
#include "bridge/NativeRunner.h"
#include "ir/Error.h"
#include "ir/Logging.h"

namespace kiln::python {

std::unique_ptr<GraphRunner>
chooseGraphRunner(std::shared_ptr<Graph> graph, OutputForm outputForm,
                  const std::string &backend, std::string eagerReason,
                  const std::string &name, bool checkInputs) {
  if (backend != "llvm")
    eagerReason = "backend '" + backend + "' was asked for";
  if (eagerReason.empty()) {
    try {
      return std::make_unique<NativeRunner>(graph, outputForm, checkInputs);
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
  return std::make_unique<EagerRunner>(std::move(graph), outputForm);
}

} // namespace kiln::python
