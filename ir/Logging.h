// KILN_LOGS: a comma list of artifact names to print (graph, guards,
// recompiles, breaks, ...); KILN_DUMP_DIR: a folder to also write each one
// to. Read once from the environment. Depends on nothing in kiln.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln {

/// Whether `KILN_LOGS` names `artifact` (or "all").
bool logEnabled(std::string_view artifact);
/// Whether `KILN_LOGS` names `artifact` with a leading '+' ("+loop_ir"):
/// print it at every stage, not only the main ones.
bool logVerbose(std::string_view artifact);
/// Prints `text` to stderr under a "[kiln:<artifact>]" header, and writes it
/// to KILN_DUMP_DIR/<artifact>-<n>.txt when that is set.
void logArtifact(std::string_view artifact, const std::string &text);
/// Re-reads the environment (tests change KILN_LOGS at run time).
void reloadLogSettings();

/// Records every artifact whose name is in `artifacts` (as well as printing
/// what KILN_LOGS asks for) until stopLogCapture, which returns them in
/// order as (name, text): kiln.explain reads a call's graphs, guards and
/// breaks this way. One capture at a time; a second start replaces the
/// first.
void startLogCapture(std::vector<std::string> artifacts);
std::vector<std::pair<std::string, std::string>> stopLogCapture();

/// Wall-clock time of a compilation's phases: `lap(name)` ends the phase
/// that began at construction or at the previous lap. `KILN_LOGS=
/// compile_time` prints them (`log`), one line per phase.
class PhaseTimes {
public:
  explicit PhaseTimes(std::string title);
  void lap(std::string_view phase);
  /// Prints the phases under `compile_time` when that log is on.
  void log() const;
  double totalMilliseconds() const;

private:
  using Clock = std::chrono::steady_clock;
  std::string title_;
  Clock::time_point start_, last_;
  std::vector<std::pair<std::string, double>> phases_;
};

} // namespace kiln
