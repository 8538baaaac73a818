// KILN_LOGS=profile: the time each step of a compiled CPU program takes
// (a kernel, or an extern call into torch) and the page faults the process
// took meanwhile (memory the allocator gave back to the system and a step
// touched again), summed over the calls and printed as one table when the
// process exits, slowest steps first.
// Programs compiled while the log is on are timed; others cost nothing.
// Depends on ir/LoopIR.h (declared here, read in the .cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::loop {
struct Program;
}

namespace kiln::runtime {

/// The time spent in each step of one program, across its calls.
class StepProfile {
public:
  /// A profile of `program`'s steps, registered for the table printed at
  /// exit (the registry keeps it after the program is gone).
  static std::shared_ptr<StepProfile> create(const loop::Program &program);

  using Clock = std::chrono::steady_clock;
  /// When a step began: the time, and the process's minor page faults.
  struct Mark {
    Clock::time_point time;
    int64_t faults = 0;
  };
  static Mark now();
  /// Adds one run of step `step` that began at `start` and ended now
  /// (thread-safe: a program may run on several threads at once; faults
  /// are the whole process's).
  void record(size_t step, const Mark &start);
  /// The table over every registered profile, slowest steps first, the
  /// `limit` slowest of them (the rest summed in one line).
  static std::string report(size_t limit = 40);

private:
  struct Entry {
    std::string label; // "kernel kernel_add_3 (aten::add.Tensor)"
    bool isKernel = true;
    int64_t runs = 0;
    double seconds = 0;
    int64_t faults = 0;
  };
  int64_t number_ = 0;         // order of creation, named in the table
  std::mutex mutex_;           // guards the entries' counts
  std::vector<Entry> entries_; // by step
};

} // namespace kiln::runtime
