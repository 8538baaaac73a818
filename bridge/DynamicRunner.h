// The runner of a graph whose sizes vary between calls (dynamic shapes):
// native code compiled once for every size (kernels take the sizes as
// arguments) where the graph compiles so, else a runner made for each
// call's symbol values, kept in a small cache of recent ones. Depends on
// bridge/RunnerChoice.h, bridge/NativeRunner.h, ir/Graph.h.
#pragma once

#include "bridge/NativeRunner.h"
#include "bridge/RunnerChoice.h"
#include "ir/Graph.h"

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::python {

/// How many symbol values a dynamic runner keeps runners for.
constexpr size_t kDynamicRunnerCacheSize = 128;

class DynamicRunner : public GraphRunner {
public:
  /// `graph` has symbols (Graph::symbols); the other arguments are those
  /// of chooseGraphRunner. The graph is compiled once with its symbols
  /// where it can be (backend 'llvm' on the CPU, no reason to run eagerly);
  /// otherwise, or where that compile fails, each set of symbol values gets
  /// a runner of its own.
  DynamicRunner(std::shared_ptr<Graph> graph, OutputForm outputForm,
                std::string backend, std::string eagerReason, std::string name,
                std::string mode, bool checkInputs = false);

  py::object run(PyObject *const *inputs, size_t count) const override;
  py::object runWithSymbols(PyObject *const *inputs, size_t count,
                            const std::vector<int64_t> &symbols) const override;
  std::string describe() const override;
  /// How many runners it has made (one per distinct symbol values; 0 where
  /// one compile serves every size).
  size_t specializations() const;
  /// Whether one compile serves every size.
  bool symbolic() const { return symbolic_ != nullptr; }

private:
  using Entry = std::pair<std::vector<int64_t>, std::shared_ptr<GraphRunner>>;
  std::shared_ptr<GraphRunner>
  runnerFor(const std::vector<int64_t> &symbols) const;

  std::shared_ptr<const Graph> graph_;
  std::unique_ptr<NativeRunner> symbolic_; // compiled for every size
  std::string symbolicRefusal_;            // why not, for describe()
  OutputForm outputForm_;
  std::string backend_;
  std::string eagerReason_;
  std::string name_;
  std::string mode_;
  bool checkInputs_ = false;
  mutable std::mutex mutex_;
  mutable std::list<Entry> recent_; // most recent first
  mutable size_t made_ = 0;
  mutable std::string lastDescription_;
};

} // namespace kiln::python
