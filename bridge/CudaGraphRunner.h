// mode="reduce-overhead" on the GPU: a graph's whole work (kiln's kernels
// and the extern calls between them) recorded once as a CUDA graph and
// replayed, so that a call costs one graph launch.
// Depends on bridge/GraphRunner.h, ir/Graph.h.
#pragma once

#include "bridge/GraphRunner.h"
#include "ir/Graph.h"

#include <memory>
#include <string>
#include <vector>

namespace kiln::python {

/// Why `graph` cannot be replayed as a CUDA graph, or empty where it can:
/// its tensors are not all on one CUDA device, a node writes its arguments
/// (the recording would write a copy of the caller's tensor), or an output
/// is an input or constant or a view of one (a replay returns copies).
std::string cudaGraphRefusal(const Graph &graph);

/// Wraps `inner`: the first call runs it as it is (a warm-up: lazy
/// initialisation in torch and the driver, which a recording may not do);
/// the second records it with torch.cuda.graph (its own memory pool, on a
/// side stream) and every later call replays the recording. Inputs whose
/// address did not change between those two calls (parameters, buffers
/// held by the caller) are read in place, the others are copied into the
/// recording's own input buffers; an in-place input at a new address
/// records again (at most a few times, then the inner runner runs plain).
/// Outputs are copied out of the recording's buffers, so that a result
/// kept by the caller is never overwritten by the next replay. A recording
/// that fails (an op that synchronises with the host) leaves the inner
/// runner to run every call.
class CudaGraphRunner : public GraphRunner {
public:
  /// `device`: the GPU's ordinal.
  CudaGraphRunner(std::unique_ptr<GraphRunner> inner, std::string name,
                  int device);
  ~CudaGraphRunner() override;

  py::object run(PyObject *const *inputs, size_t count) const override;
  std::string describe() const override;

private:
  struct Recording;

  py::object record(PyObject *const *inputs, size_t count) const;
  py::object replay(PyObject *const *inputs, size_t count) const;
  void disable(const std::string &reason) const;

  std::unique_ptr<GraphRunner> inner_;
  std::string name_;
  int device_;
  // The GIL serialises calls; `busy_` lets a call that arrives while another
  // thread has let the GIL go inside torch run plain instead of waiting.
  mutable bool busy_ = false;
  mutable int calls_ = 0;
  mutable int recordings_ = 0;
  mutable std::string disabled_;
  mutable std::unique_ptr<Recording> recording_;
};

} // namespace kiln::python
