// KILN_LOGS=profile. Depends on runtime/StepProfile.h, ir/LoopIR.h,
// ir/Logging.h.
#include "runtime/StepProfile.h"

#include "ir/Graph.h"
#include "ir/Logging.h"
#include "ir/LoopIR.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include <sys/resource.h>

namespace kiln::runtime {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<StepProfile>> profiles;
};

// Never destroyed: the table prints from an atexit handler, after which
// static destructors may run in any order.
Registry &registry() {
  static Registry *instance = new Registry();
  return *instance;
}

void printAtExit() { logArtifact("profile", StepProfile::report()); }

// "aten::add.Tensor (from m.py:3 in f) + aten::mul.Tensor (from ...)" as
// "aten::add.Tensor+aten::mul.Tensor", each op once, at most `limit` long.
std::string opsOf(const std::string &origin, size_t limit) {
  std::vector<std::string> ops;
  size_t at = 0;
  while (at < origin.size()) {
    size_t end = origin.find(" + ", at);
    if (end == std::string::npos)
      end = origin.size();
    std::string part = origin.substr(at, end - at);
    part = part.substr(0, part.find(" (from "));
    if (std::find(ops.begin(), ops.end(), part) == ops.end())
      ops.push_back(part);
    at = end + 3;
  }
  std::string text;
  for (const std::string &op : ops)
    text += (text.empty() ? "" : "+") + op;
  if (text.size() > limit)
    text = text.substr(0, limit - 3) + "...";
  return text;
}

} // namespace

std::shared_ptr<StepProfile> StepProfile::create(const loop::Program &program) {
  auto profile = std::make_shared<StepProfile>();
  for (const loop::Step &step : program.steps) {
    Entry entry;
    if (step.kind == loop::Step::Kind::Kernel) {
      const loop::Kernel &kernel = step.kernel;
      std::string what = opsOf(kernel.origin, 60);
      if (kernel.contraction)
        what = "GEMM" + (what.empty() ? "" : ": " + what);
      entry.label =
          "kernel " + kernel.name + (what.empty() ? "" : " (" + what + ")");
    } else {
      entry.isKernel = false;
      entry.label = "extern " + step.node->schema()->qualifiedName();
    }
    profile->entries_.push_back(std::move(entry));
  }
  Registry &all = registry();
  std::lock_guard<std::mutex> lock(all.mutex);
  if (all.profiles.empty())
    std::atexit(printAtExit);
  profile->number_ = static_cast<int64_t>(all.profiles.size());
  all.profiles.push_back(profile);
  return profile;
}

namespace {

int64_t minorFaults() {
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0)
    return 0;
  return static_cast<int64_t>(usage.ru_minflt);
}

} // namespace

StepProfile::Mark StepProfile::now() { return {Clock::now(), minorFaults()}; }

void StepProfile::record(size_t step, const Mark &start) {
  double seconds =
      std::chrono::duration<double>(Clock::now() - start.time).count();
  int64_t faults = minorFaults() - start.faults;
  std::lock_guard<std::mutex> lock(mutex_);
  Entry &entry = entries_[step];
  ++entry.runs;
  entry.seconds += seconds;
  entry.faults += faults;
}

std::string StepProfile::report(size_t limit) {
  struct Row {
    double seconds;
    int64_t runs, faults;
    std::string label;
  };
  std::vector<Row> rows;
  double total = 0, kernels = 0;
  std::ostringstream text;
  {
    Registry &all = registry();
    std::lock_guard<std::mutex> lock(all.mutex);
    text << "time in the steps of " << all.profiles.size()
         << " compiled program(s), slowest first\n";
    for (const auto &profile : all.profiles) {
      std::lock_guard<std::mutex> counts(profile->mutex_);
      for (size_t step = 0; step < profile->entries_.size(); ++step) {
        const Entry &entry = profile->entries_[step];
        if (entry.runs == 0)
          continue;
        total += entry.seconds;
        if (entry.isKernel)
          kernels += entry.seconds;
        rows.push_back({entry.seconds, entry.runs, entry.faults,
                        "program " + std::to_string(profile->number_) +
                            " step " + std::to_string(step) + ": " +
                            entry.label});
      }
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row &a, const Row &b) {
    return a.seconds > b.seconds;
  });
  char line[512];
  std::snprintf(line, sizeof line, "%10s %6s %10s %8s %8s  %s\n", "total ms",
                "%", "runs", "us/run", "faults/run", "step");
  text << line;
  double rest = 0;
  int64_t restRuns = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row &row = rows[i];
    if (i >= limit) {
      rest += row.seconds;
      restRuns += row.runs;
      continue;
    }
    std::snprintf(line, sizeof line, "%10.3f %5.1f%% %10lld %8.1f %10.1f  %s\n",
                  row.seconds * 1e3, total > 0 ? 100 * row.seconds / total : 0,
                  static_cast<long long>(row.runs),
                  row.seconds * 1e6 / static_cast<double>(row.runs),
                  static_cast<double>(row.faults) /
                      static_cast<double>(row.runs),
                  row.label.c_str());
    text << line;
  }
  if (rows.size() > limit) {
    std::snprintf(
        line, sizeof line, "%10.3f %5.1f%% %10lld %8s %10s  %zu more steps\n",
        rest * 1e3, total > 0 ? 100 * rest / total : 0,
        static_cast<long long>(restRuns), "", "", rows.size() - limit);
    text << line;
  }
  std::snprintf(line, sizeof line,
                "steps: %.3f ms, of which kernels %.3f ms and extern calls "
                "%.3f ms\n",
                total * 1e3, kernels * 1e3, (total - kernels) * 1e3);
  text << line;
  return text.str();
}

} // namespace kiln::runtime
