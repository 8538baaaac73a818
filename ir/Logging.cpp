// KILN_LOGS and KILN_DUMP_DIR. Depends on nothing in kiln.
#include "ir/Logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

namespace kiln {
namespace {

struct Capture {
  std::set<std::string, std::less<>> artifacts;
  std::vector<std::pair<std::string, std::string>> records;
};

struct Settings {
  std::set<std::string, std::less<>> artifacts;
  std::set<std::string, std::less<>> verbose; // named with a leading '+'
  std::optional<Capture> capture;             // startLogCapture's
  std::string dumpDirectory;
  std::string logsText; // KILN_LOGS as it was read
  std::string dumpText; // KILN_DUMP_DIR as it was read
};

std::string environment(const char *name) {
  const char *value = std::getenv(name);
  return value ? value : "";
}

std::mutex &settingsMutex() {
  static std::mutex mutex;
  return mutex;
}

Settings readSettings() {
  Settings settings;
  settings.logsText = environment("KILN_LOGS");
  settings.dumpText = environment("KILN_DUMP_DIR");
  if (const char *logs = std::getenv("KILN_LOGS")) {
    std::string list = logs;
    size_t start = 0;
    while (start <= list.size()) {
      size_t comma = list.find(',', start);
      std::string name = list.substr(start, comma - start);
      bool verbose = false;
      while (!name.empty() && (name.front() == ' ' || name.front() == '+')) {
        verbose |= name.front() == '+';
        name.erase(name.begin());
      }
      while (!name.empty() && name.back() == ' ')
        name.pop_back();
      if (!name.empty())
        settings.artifacts.insert(name);
      if (!name.empty() && verbose)
        settings.verbose.insert(name);
      if (comma == std::string::npos)
        break;
      start = comma + 1;
    }
  }
  if (const char *directory = std::getenv("KILN_DUMP_DIR"))
    settings.dumpDirectory = directory;
  return settings;
}

// Logging happens at capture time, not per call: re-reading the environment
// each time lets a program (or a test) change KILN_LOGS while it runs.
Settings &settings() {
  static Settings instance = readSettings();
  if (instance.logsText != environment("KILN_LOGS") ||
      instance.dumpText != environment("KILN_DUMP_DIR")) {
    std::optional<Capture> capture = std::move(instance.capture);
    instance = readSettings();
    instance.capture = std::move(capture);
  }
  return instance;
}

} // namespace

namespace {

bool printed(const Settings &current, std::string_view artifact) {
  return current.artifacts.count(artifact) || current.artifacts.count("all");
}

bool captured(const Settings &current, std::string_view artifact) {
  return current.capture && current.capture->artifacts.count(artifact);
}

} // namespace

bool logEnabled(std::string_view artifact) {
  std::lock_guard<std::mutex> lock(settingsMutex());
  const Settings &current = settings();
  return printed(current, artifact) || captured(current, artifact);
}

bool logVerbose(std::string_view artifact) {
  std::lock_guard<std::mutex> lock(settingsMutex());
  return settings().verbose.count(artifact) > 0;
}

void logArtifact(std::string_view artifact, const std::string &text) {
  static std::atomic<int> counter{0};
  std::string dumpDirectory;
  bool print;
  {
    std::lock_guard<std::mutex> lock(settingsMutex());
    Settings &current = settings();
    if (captured(current, artifact))
      current.capture->records.emplace_back(std::string(artifact), text);
    print = printed(current, artifact);
    dumpDirectory = current.dumpDirectory;
  }
  if (!print)
    return;
  std::fprintf(stderr, "[kiln:%.*s] %s%s", static_cast<int>(artifact.size()),
               artifact.data(), text.c_str(),
               text.empty() || text.back() != '\n' ? "\n" : "");
  if (!dumpDirectory.empty()) {
    std::string path = dumpDirectory + "/" + std::string(artifact) + "-" +
                       std::to_string(counter++) + ".txt";
    std::error_code ignored; // a failure shows when the file cannot open
    std::filesystem::create_directories(dumpDirectory, ignored);
    std::ofstream file(path);
    file << text;
    static std::atomic<bool> warned{false};
    if (!file && !warned.exchange(true))
      std::fprintf(stderr, "[kiln] KILN_DUMP_DIR: cannot write %s\n",
                   path.c_str());
  }
}

void reloadLogSettings() {
  std::lock_guard<std::mutex> lock(settingsMutex());
  std::optional<Capture> capture = std::move(settings().capture);
  settings() = readSettings();
  settings().capture = std::move(capture);
}

void startLogCapture(std::vector<std::string> artifacts) {
  std::lock_guard<std::mutex> lock(settingsMutex());
  Capture capture;
  capture.artifacts.insert(artifacts.begin(), artifacts.end());
  settings().capture = std::move(capture);
}

std::vector<std::pair<std::string, std::string>> stopLogCapture() {
  std::lock_guard<std::mutex> lock(settingsMutex());
  std::optional<Capture> capture = std::move(settings().capture);
  settings().capture.reset();
  return capture ? std::move(capture->records)
                 : std::vector<std::pair<std::string, std::string>>{};
}

PhaseTimes::PhaseTimes(std::string title)
    : title_(std::move(title)), start_(Clock::now()), last_(start_) {}

void PhaseTimes::lap(std::string_view phase) {
  Clock::time_point now = Clock::now();
  phases_.emplace_back(
      std::string(phase),
      std::chrono::duration<double, std::milli>(now - last_).count());
  last_ = now;
}

double PhaseTimes::totalMilliseconds() const {
  return std::chrono::duration<double, std::milli>(last_ - start_).count();
}

void PhaseTimes::log() const {
  if (!logEnabled("compile_time"))
    return;
  std::ostringstream text;
  text << title_ << ": " << std::fixed << std::setprecision(1)
       << totalMilliseconds() << " ms\n";
  for (const auto &[phase, milliseconds] : phases_)
    text << "  " << std::setw(9) << milliseconds << " ms  " << phase << "\n";
  logArtifact("compile_time", text.str());
}

} // namespace kiln
