// The cache of compiled graphs for one code object (or one kiln.compile'd
// function): entries of guards + compiled graph, tried in order. A miss
// captures the frame again, up to a limit; what cannot be captured runs in
// CPython. Depends on frontend/GuardTree.h, pybind11, CPython.
#pragma once

#include "bridge/GraphRunner.h"
#include "frontend/GuardTree.h"
#include "frontend/SymbolicEvaluator.h"
#include "ir/Graph.h"

#include <pybind11/pybind11.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::frontend {

struct CacheOptions {
  std::string backend = "llvm";
  bool fullgraph = false;
  int cacheLimit = 8;
  /// "default", "reduce-overhead" (GPU graphs replayed as CUDA graphs)
  /// or "max-autotune" (as default today).
  std::string mode = "default";
  /// kiln.compile's `dynamic`: None (Automatic), True (Always), False.
  DynamicPolicy::Mode dynamic = DynamicPolicy::Mode::Automatic;
  /// Entries kept beyond cacheLimit: a resume function's that runs the rest
  /// of a loop keeps one a step (CodeCache::allowLoopSteps).
  int loopSteps = 0;
};

struct CacheEntry;
struct GraphBreak;

class CodeCache {
public:
  explicit CodeCache(CacheOptions options) : options_(std::move(options)) {}

  /// Runs `function` with its arguments bound in `inputs`: the cached graph
  /// whose guards pass, else a fresh capture. Returns a new reference; null
  /// with no Python error set means "run the frame in CPython"; null with an
  /// error set is an error (kiln.Unsupported under fullgraph).
  PyObject *run(PyObject *function, const FrameInputs &inputs);

  /// Whether every call now runs in CPython (capture failed, or the limit).
  bool runsInCPython() const { return runInCPython_; }
  void noteFallback() { fallbacks_++; }
  /// Entries, graphs, guards and counters, for tests and kiln.explain; the
  /// graph breaks, and the graph count with those of resume functions.
  py::dict info() const;
  void reset();
  const CacheOptions &options() const { return options_; }
  /// Keeps `steps` entries more than the limit (a resume function's that
  /// runs the rest of a loop, a step each).
  void allowLoopSteps(int steps) {
    options_.loopSteps = std::max(options_.loopSteps, steps);
  }

private:
  std::unique_ptr<python::GraphRunner>
  makeRunner(const std::shared_ptr<Graph> &graph,
             const std::vector<py::object> &graphInputs,
             const std::string &name) const;

  using EntryList = std::vector<std::shared_ptr<const CacheEntry>>;

  /// The entry whose guards pass for this call, else a fresh capture's
  /// (null, with a Python error or none, where the frame runs in CPython);
  /// fills `graphInputs`, `reads` and (an entry found whose sizes vary)
  /// `symbols` for this call. Runs with the hook suspended.
  std::shared_ptr<const CacheEntry>
  lookUpOrCapture(PyObject *function, const FrameInputs &inputs,
                  std::vector<py::object> &graphInputs,
                  std::vector<py::object> &reads,
                  std::vector<int64_t> &symbols);
  /// Captures the frame and compiles its graph; fills `graphInputs` for
  /// this call. Throws what capture or compilation throws. It and the
  /// functions below run with the hook suspended (lookUpOrCapture's).
  std::shared_ptr<CacheEntry>
  captureEntry(PyObject *function, const FrameInputs &inputs,
               const std::string &name, std::vector<py::object> &graphInputs,
               std::vector<py::object> &reads) const;
  /// Makes the continuation of a capture that ended at `graphBreak` (its
  /// code, once per entry, by kiln._resume).
  void makeContinuation(CacheEntry &entry, const GraphBreak &graphBreak,
                        const FrameInputs &inputs) const;
  /// Captures with the dims the policy makes symbolic where it makes any,
  /// else (or where that capture fails) with static shapes.
  Capture capture(PyObject *function, const FrameInputs &inputs,
                  const std::string &name) const;
  /// A capture with dynamic shapes failed for `reason`: later captures are
  /// static.
  void symbolicFailed(const std::string &name, const std::string &reason) const;
  /// Automatic dynamic shapes: the dims of graph inputs whose sizes differ
  /// from those of an earlier entry's same input join the policy's learned
  /// dims; says whether any did.
  bool learnDynamicDims(const CacheEntry &entry) const;
  /// The entries now (threads replace the list as a whole, atomically).
  std::shared_ptr<const EntryList> entries() const;
  int entryLimit() const { return options_.cacheLimit + options_.loopSteps; }
  /// Adds `entry` unless the cache limit is reached; says whether it did.
  bool addEntry(std::shared_ptr<const CacheEntry> entry);
  /// From now on every call runs in CPython, for `reason`.
  void fallBack(const std::string &reason);

  CacheOptions options_;
  std::shared_ptr<const EntryList> entries_ = std::make_shared<EntryList>();
  std::atomic<bool> runInCPython_{false};
  /// Serialises changes to the entries and the fallback reason (never held
  /// while Python runs).
  mutable std::mutex mutex_;
  std::string fallbackReason_;
  /// Dims learned to vary (guarded by mutex_).
  mutable DynamicPolicy policy_;
  /// A symbolic capture pinned every symbol to its value (a torch meta
  /// function specialised it): later captures are static (mutex_).
  mutable bool symbolicUseless_ = false;
  std::atomic<long> hits_{0};
  std::atomic<long> misses_{0};
  std::atomic<long> fallbacks_{0};
};

/// Builds the frame inputs of a call of `function` whose arguments are bound
/// in `locals` (one per parameter, in the code's order).
FrameInputs frameInputsOf(PyObject *function, PyObject *const *locals,
                          int count);

/// kiln._C.Unsupported.
PyObject *unsupportedErrorType();

} // namespace kiln::frontend
