// The runner of a graph whose sizes vary between calls (dynamic shapes): it
// reads the size symbols' values from each call's inputs and runs a runner
// made for those values, kept in a small cache of recent ones. Depends on
// bridge/RunnerChoice.h, ir/Graph.h.
#pragma once

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
  /// of chooseGraphRunner, used for each set of symbol values.
  DynamicRunner(std::shared_ptr<const Graph> graph, OutputForm outputForm,
                std::string backend, std::string eagerReason, std::string name,
                std::string mode, bool checkInputs = false);

  py::object run(PyObject *const *inputs, size_t count) const override;
  std::string describe() const override;
  /// How many runners it has made (one per distinct symbol values).
  size_t specializations() const;

private:
  using Entry = std::pair<std::vector<int64_t>, std::shared_ptr<GraphRunner>>;
  std::shared_ptr<GraphRunner>
  runnerFor(const std::vector<int64_t> &symbols) const;

  std::shared_ptr<const Graph> graph_;
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
