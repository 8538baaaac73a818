// The cache of compiled graphs for one code object or compiled function.
// Depends on frontend/, bridge/RunnerChoice.h,
// ir/Logging.h, CPython.
#include "frontend/CodeCache.h"

#include "bridge/RunnerChoice.h"
#include "frontend/EvalFrameHook.h"
#include "frontend/SymbolicEvaluator.h"
#include "ir/Error.h"
#include "ir/Logging.h"

namespace kiln::frontend {

struct CacheEntry {
  GuardTree guards;
  std::unique_ptr<python::GraphRunner> runner;
  OutputTemplate output;
  std::string graphText;
};

namespace {

std::string qualifiedNameOf(PyObject *function) {
  py::object name =
      py::getattr(py::handle(function), "__qualname__", py::str("?"));
  return py::str(name).cast<std::string>();
}

PyObject *runEntry(const CacheEntry &entry,
                   const std::vector<py::object> &graphInputs) {
  std::vector<PyObject *> inputs;
  inputs.reserve(graphInputs.size());
  for (const py::object &input : graphInputs)
    inputs.push_back(input.ptr());
  // Torch's own Python code runs below: the hook must not capture it, and a
  // graph that changes grad mode leaves it as it found it.
  HookSuspension suspension;
  py::object results = entry.runner->run(inputs.data(), inputs.size());
  return entry.output.build(&PyTuple_GET_ITEM(results.ptr(), 0))
      .release()
      .ptr();
}

} // namespace

// Native kernels compute values, not autograd history: a graph whose
// outputs need a grad_fn (grad mode on, an input requiring grad) runs
// through torch's own operators.
static bool needsAutograd(const Graph &graph,
                          const std::vector<py::object> &graphInputs) {
  bool switchesGradMode = false;
  for (const auto &node : graph.nodes())
    switchesGradMode |=
        node->schema() && node->schema()->name == "kiln::set_grad_enabled";
  if (!switchesGradMode &&
      !PyObject_IsTrue(
          python::TorchHandles::get().torch.attr("is_grad_enabled")().ptr()))
    return false;
  for (const py::object &input : graphInputs)
    if (python::isTensor(input) && py::cast<bool>(input.attr("requires_grad")))
      return true;
  return false;
}

std::unique_ptr<python::GraphRunner>
CodeCache::makeRunner(const std::shared_ptr<Graph> &graph,
                      const std::vector<py::object> &graphInputs,
                      const std::string &name) const {
  std::string eagerReason;
  if (needsAutograd(*graph, graphInputs))
    eagerReason = "autograd records its history (an input requires grad)";
  return python::chooseGraphRunner(graph, python::OutputForm::Tuple,
                                   options_.backend, std::move(eagerReason),
                                   name, /*checkInputs=*/false, options_.mode);
}

PyObject *unsupportedErrorType() {
  PYBIND11_CONSTINIT static py::gil_safe_call_once_and_store<PyObject *> type;
  return type
      .call_once_and_store_result([] {
        py::object module = py::module_::import("kiln._C");
        return py::object(module.attr("Unsupported")).release().ptr();
      })
      .get_stored();
}

FrameInputs frameInputsOf(PyObject *function, PyObject *const *locals,
                          int count) {
  FrameInputs inputs;
  inputs.locals = locals;
  inputs.localCount = count;
  inputs.globals = PyFunction_GET_GLOBALS(function);
  inputs.closure = PyFunction_GET_CLOSURE(function);
  return inputs;
}

void CodeCache::fallBack(const std::string &reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (runInCPython_)
    return;
  fallbackReason_ = reason;
  runInCPython_ = true;
}

std::shared_ptr<const CodeCache::EntryList> CodeCache::entries() const {
  return std::atomic_load(&entries_);
}

bool CodeCache::addEntry(std::shared_ptr<const CacheEntry> entry) {
  // Threads that missed together captured together: the limit holds for
  // the entries they add, counted under the lock.
  std::lock_guard<std::mutex> lock(mutex_);
  std::shared_ptr<const EntryList> current = std::atomic_load(&entries_);
  if (static_cast<int>(current->size()) >= options_.cacheLimit)
    return false;
  auto updated = std::make_shared<EntryList>(*current);
  updated->push_back(std::move(entry));
  std::atomic_store(&entries_, std::shared_ptr<const EntryList>(updated));
  return true;
}

constexpr const char *kIsAnyAutocastEnabled[] = {
    "_C", "_is_any_autocast_enabled", nullptr};
constexpr const char *kPeekFunctorchInterpreter[] = {
    "_C", "_functorch", "peek_interpreter_stack", nullptr};

// Why a call must run in CPython whatever its guards say, or null: captured
// graphs hold the dtypes of calls without torch.autocast, and plain tensors
// where torch.func transforms (vmap, grad) pass wrapped ones.
static const char *torchModeRefusal() {
  PyObject *autocast = python::callTorchState<kIsAnyAutocastEnabled>();
  bool autocastOn = autocast != Py_False;
  Py_XDECREF(autocast);
  if (autocastOn)
    return "torch.autocast is on";
  PyObject *interpreter = python::callTorchState<kPeekFunctorchInterpreter>();
  bool transformed = interpreter != Py_None;
  Py_XDECREF(interpreter);
  if (transformed)
    return "a torch.func transform (vmap, grad, ...) is active";
  return nullptr;
}

PyObject *CodeCache::run(PyObject *function, const FrameInputs &inputs) {
  if (runInCPython_)
    return nullptr;
  if (const char *refusal = torchModeRefusal()) {
    if (logEnabled("breaks"))
      logArtifact("breaks",
                  qualifiedNameOf(function) + " runs in CPython: " + refusal);
    return nullptr;
  }
  try {
    std::shared_ptr<const EntryList> entries = this->entries();
    std::vector<py::object> graphInputs;
    std::string firstFailure;
    for (const auto &entry : *entries) {
      std::string *failure = firstFailure.empty() ? &firstFailure : nullptr;
      if (entry->guards.evaluate(inputs, graphInputs, failure)) {
        hits_++;
        return runEntry(*entry, graphInputs);
      }
    }
    misses_++;
    std::string name = qualifiedNameOf(function);
    if (static_cast<int>(entries->size()) >= options_.cacheLimit) {
      fallBack("cache limit (" + std::to_string(options_.cacheLimit) +
               ") reached; last failed guard: " + firstFailure);
      std::string warning = "kiln: " + name + " was recompiled " +
                            std::to_string(options_.cacheLimit) +
                            " times; it runs in CPython from now on (" +
                            firstFailure + ")";
      if (PyErr_WarnEx(PyExc_UserWarning, warning.c_str(), 1) < 0)
        return nullptr;
      return nullptr;
    }
    if (!entries->empty() && logEnabled("recompiles"))
      logArtifact("recompiles", "recompiling " + name + ": " + firstFailure);

    // Capture and compilation never raise into the user's program: what
    // they cannot do, or an internal error of theirs, runs the frame in
    // CPython (which raises whatever the user's own code raises).
    std::string unsupported;
    std::shared_ptr<CacheEntry> entry;
    try {
      entry = captureEntry(function, inputs, name, graphInputs);
    } catch (const Unsupported &error) {
      unsupported = error.what();
    } catch (py::error_already_set &error) {
      unsupported =
          std::string("internal error during capture: ") + error.what();
    } catch (const std::exception &error) {
      unsupported =
          std::string("internal error during capture: ") + error.what();
    }
    if (!entry) {
      if (options_.fullgraph) {
        PyErr_SetString(unsupportedErrorType(),
                        (name + ": " + unsupported).c_str());
        return nullptr;
      }
      PyErr_Clear(); // a C API failure the error did not fetch
      if (logEnabled("breaks"))
        logArtifact("breaks", name + " runs in CPython: " + unsupported);
      fallBack(unsupported);
      return nullptr;
    }
    // Over the limit (threads recompiling at once), the entry serves this
    // call only.
    addEntry(entry);
    return runEntry(*entry, graphInputs);
  } catch (py::error_already_set &error) {
    error.restore();
    return nullptr;
  } catch (const Unsupported &error) {
    PyErr_SetString(unsupportedErrorType(), error.what());
    return nullptr;
  } catch (const std::exception &error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
    return nullptr;
  }
}

std::shared_ptr<CacheEntry>
CodeCache::captureEntry(PyObject *function, const FrameInputs &inputs,
                        const std::string &name,
                        std::vector<py::object> &graphInputs) const {
  Capture capture;
  {
    HookSuspension suspension;
    capture = captureFunction(function, inputs);
  }
  auto entry = std::make_shared<CacheEntry>();
  entry->output = std::move(capture.output);
  entry->guards = std::move(capture.guards);
  // The graph's inputs are exactly what the guard tree collects.
  graphInputs.clear();
  std::string failure;
  if (!entry->guards.evaluate(inputs, graphInputs, &failure))
    throw Error("the guards of a fresh capture fail on the call that made "
                "them (" +
                failure + ")");
  // Choosing the runner cleans the graph up (dead code): log it after.
  entry->runner = makeRunner(capture.graph, graphInputs, name);
  entry->graphText = capture.graph->str();
  if (logEnabled("graph")) {
    std::string text = "captured " + name + "\n" + entry->graphText;
    for (const std::string &note : capture.notes)
      text += "  note: " + note + "\n";
    logArtifact("graph", text);
  }
  if (logEnabled("guards"))
    logArtifact("guards", "guards of " + name + "\n" + entry->guards.str());
  return entry;
}

py::dict CodeCache::info() const {
  py::list graphs, guards, runners;
  std::shared_ptr<const EntryList> entries = this->entries();
  for (const auto &entry : *entries) {
    graphs.append(entry->graphText);
    guards.append(entry->guards.str());
    runners.append(entry->runner->describe());
  }
  py::dict info;
  info["entries"] = py::int_(entries->size());
  info["hits"] = py::int_(hits_.load());
  info["misses"] = py::int_(misses_.load());
  info["fallbacks"] = py::int_(fallbacks_.load());
  info["runs_in_cpython"] = py::bool_(runInCPython_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    info["fallback_reason"] = py::str(fallbackReason_);
  }
  info["graphs"] = graphs;
  info["guards"] = guards;
  info["runners"] = runners;
  return info;
}

void CodeCache::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::atomic_store(&entries_, std::shared_ptr<const EntryList>(
                                   std::make_shared<EntryList>()));
  runInCPython_ = false;
  fallbackReason_.clear();
}

} // namespace kiln::frontend
