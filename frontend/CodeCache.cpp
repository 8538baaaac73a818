// The cache of compiled graphs for one code object or compiled function.
// Depends on frontend/, bridge/RunnerChoice.h,
// ir/Logging.h, CPython.
#include "frontend/CodeCache.h"

#include "bridge/DynamicRunner.h"
#include "bridge/PythonConversion.h"
#include "bridge/RunnerChoice.h"
#include "bridge/TorchCall.h"
#include "frontend/EvalFrameHook.h"
#include "frontend/SymbolicEvaluator.h"
#include "ir/Error.h"
#include "ir/Logging.h"

#include <algorithm>

namespace kiln::frontend {

struct CacheEntry {
  GuardTree guards;
  std::unique_ptr<python::GraphRunner> runner;
  OutputTemplate output;
  /// A whole-frame capture that writes to outside objects: builds the
  /// result and replays the writes.
  std::shared_ptr<const RebuildPlan> replay;
  std::string graphText;
  /// A capture that ended at a graph break: the frame's state there, the
  /// continuation that runs the break's instruction in CPython and calls
  /// the resume function, and the codes of the resume functions (two
  /// after a conditional jump: the next instruction's, the target's).
  std::shared_ptr<const GraphBreak> graphBreak;
  py::object continuation;
  std::vector<py::object> resumeCodes;
  /// How many of the frame's locals the continuation takes (a resume
  /// function's stack temporaries, unbound after its prologue, are not).
  size_t continuationLocals = 0;
  /// The frame's locals passed after the stack items: its cells that are
  /// not arguments.
  std::vector<int> continuationCells;
  /// The globals the continuation runs with (it holds them).
  PyObject *globals = nullptr;
  /// The sizes of the graph inputs in the capturing call, by source
  /// (automatic dynamic shapes compares them).
  std::vector<std::pair<std::string, Shape>> inputSizes;
  /// The grad mode the frame leaves behind, where it changes it.
  std::optional<bool> finalGradMode;
};

namespace {

std::string qualifiedNameOf(PyObject *function) {
  py::object name =
      py::getattr(py::handle(function), "__qualname__", py::str("?"));
  return py::str(name).cast<std::string>();
}

PyObject *runEntry(const CacheEntry &entry,
                   const std::vector<py::object> &graphInputs,
                   const std::vector<py::object> &reads,
                   const std::vector<int64_t> &symbols,
                   const FrameInputs &frame, const CacheOptions &options) {
  std::vector<PyObject *> inputs;
  inputs.reserve(graphInputs.size());
  for (const py::object &input : graphInputs)
    inputs.push_back(input.ptr());
  std::vector<py::object> values;
  {
    // Torch's own Python code runs below: the hook must not capture it, and
    // a graph that changes grad mode leaves it as it found it.
    HookSuspension suspension;
    py::object results =
        symbols.empty() ? entry.runner->run(inputs.data(), inputs.size())
                        : entry.runner->runWithSymbols(inputs.data(),
                                                       inputs.size(), symbols);
    if (entry.finalGradMode)
      python::TorchHandles::get().torch.attr("_C").attr("_set_grad_enabled")(
          *entry.finalGradMode);
    PyObject *const *outputs = &PyTuple_GET_ITEM(results.ptr(), 0);
    if (entry.replay) {
      std::vector<py::object> built = entry.replay->rebuild(outputs, reads);
      return built.at(entry.replay->result).release().ptr();
    }
    if (!entry.graphBreak)
      return entry.output.build(outputs).release().ptr();
    values = entry.graphBreak->rebuild(outputs, reads);
  }
  // The continuation takes every local (None where unbound) and the stack
  // items that are objects, in order.
  std::vector<PyObject *> arguments;
  const std::vector<int> &locals = entry.graphBreak->locals;
  for (size_t i = 0; i < entry.continuationLocals; ++i)
    arguments.push_back(locals[i] < 0 ? Py_None : values[locals[i]].ptr());
  for (int item : entry.graphBreak->stack)
    if (item >= 0)
      arguments.push_back(values[item].ptr());
  for (int slot : entry.continuationCells)
    arguments.push_back(values.at(locals.at(slot)).ptr());
  // A nested function's continuation reads this call's closure cells.
  py::object continuation = entry.continuation;
  if (frame.closure && PyFunction_GET_CLOSURE(continuation.ptr()) &&
      PyFunction_GET_CLOSURE(continuation.ptr()) != frame.closure) {
    continuation = py::reinterpret_steal<py::object>(
        PyFunction_New(PyFunction_GET_CODE(continuation.ptr()), entry.globals));
    if (!continuation ||
        PyFunction_SetClosure(continuation.ptr(), frame.closure) < 0)
      throw py::error_already_set();
  }
  // The resume function's frames are captured in turn, with this
  // function's options.
  HookActivation activation(nullptr, &options);
  return PyObject_Vectorcall(continuation.ptr(), arguments.data(),
                             arguments.size(), nullptr);
}

std::string breakDescription(const GraphBreak &graphBreak) {
  return "a graph break at " + graphBreak.location + " (" +
         graphBreak.instruction + "): " + graphBreak.reason;
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
  if (!graph->symbols().empty())
    return std::make_unique<python::DynamicRunner>(
        graph, python::OutputForm::Tuple, options_.backend,
        std::move(eagerReason), name, options_.mode);
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
  if (static_cast<int>(current->size()) >= entryLimit())
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
    std::vector<py::object> graphInputs, reads;
    std::vector<int64_t> symbols;
    std::shared_ptr<const CacheEntry> chosen =
        lookUpOrCapture(function, inputs, graphInputs, reads, symbols);
    if (!chosen)
      return nullptr;
    return runEntry(*chosen, graphInputs, reads, symbols, inputs, options_);
  } catch (py::error_already_set &error) {
    error.restore();
    return nullptr;
  } catch (const Unsupported &error) {
    PyErr_SetString(unsupportedErrorType(), error.what());
    return nullptr;
  } catch (const IndexOutOfRange &error) {
    python::setIndexError(error);
    return nullptr;
  } catch (const std::exception &error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
    return nullptr;
  }
}

std::shared_ptr<const CacheEntry>
CodeCache::lookUpOrCapture(PyObject *function, const FrameInputs &inputs,
                           std::vector<py::object> &graphInputs,
                           std::vector<py::object> &reads,
                           std::vector<int64_t> &symbols) {
  // Guards, capture and compilation run Python code of their own: a
  // __getattribute__ of the user's class read by a guard, torch's meta
  // functions. It runs in CPython: hooking it would capture kiln's own
  // reads, and recurse without end (a guard reading an attribute through
  // the very frame it guards).
  HookSuspension suspension;
  std::shared_ptr<const EntryList> entries = this->entries();
  std::string firstFailure;
  for (const auto &entry : *entries) {
    // A continuation runs with the globals of the capture's function.
    if (entry->globals && entry->globals != inputs.globals)
      continue;
    std::string *failure = firstFailure.empty() ? &firstFailure : nullptr;
    if (entry->guards.evaluate(inputs, graphInputs, failure, &reads,
                               &symbols)) {
      hits_++;
      return entry;
    }
  }
  misses_++;
  std::string name = qualifiedNameOf(function);
  if (static_cast<int>(entries->size()) >= entryLimit()) {
    fallBack("cache limit (" + std::to_string(entryLimit()) +
             ") reached; last failed guard: " + firstFailure);
    std::string warning =
        "kiln: " + name + " was recompiled " + std::to_string(entryLimit()) +
        " times; it runs in CPython from now on (" + firstFailure + ")";
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
    entry = captureEntry(function, inputs, name, graphInputs, reads);
  } catch (const Unsupported &error) {
    unsupported = error.what();
  } catch (py::error_already_set &error) {
    unsupported = std::string("internal error during capture: ") + error.what();
  } catch (const std::exception &error) {
    unsupported = std::string("internal error during capture: ") + error.what();
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
  return entry;
}

std::shared_ptr<CacheEntry>
CodeCache::captureEntry(PyObject *function, const FrameInputs &inputs,
                        const std::string &name,
                        std::vector<py::object> &graphInputs,
                        std::vector<py::object> &reads) const {
  auto entry = std::make_shared<CacheEntry>();
  Capture capture;
  for (int attempt = 0;; ++attempt) {
    capture = this->capture(function, inputs, name);
    // The graph's inputs are exactly what the guard tree collects.
    graphInputs.clear();
    std::string failure;
    if (!capture.guards.evaluate(inputs, graphInputs, &failure, &reads))
      throw Error("the guards of a fresh capture fail on the call that made "
                  "them (" +
                  failure + ")");
    entry->inputSizes.clear();
    for (size_t slot = 0; slot < graphInputs.size(); ++slot)
      entry->inputSizes.emplace_back(
          capture.guards.graphInputSource(slot)->str(),
          python::tensorMetaOf(graphInputs[slot]).sizes);
    // A size that changed since an earlier capture: capture again with it
    // symbolic (once: the second capture learns nothing new).
    if (attempt > 0 || !capture.graph->symbols().empty() ||
        !learnDynamicDims(*entry))
      break;
  }
  if (capture.graphBreak)
    makeContinuation(*entry, *capture.graphBreak, inputs);
  entry->output = std::move(capture.output);
  entry->guards = std::move(capture.guards);
  entry->graphBreak = capture.graphBreak;
  entry->replay = capture.replay;
  entry->finalGradMode = capture.finalGradMode;
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
  if (entry->graphBreak && logEnabled("breaks"))
    logArtifact("breaks",
                name + " has " + breakDescription(*entry->graphBreak));
  return entry;
}

namespace {

/// Whether every size symbol of a capture is pinned to a constant by one of
/// its relations (`s0 == 3`): a torch meta function specialised them.
bool everySymbolPinned(const Capture &capture) {
  size_t symbols = capture.graph->symbols().size();
  if (symbols == 0)
    return false;
  std::vector<bool> pinned(symbols, false);
  for (const SizeRelation &relation : capture.guards.sizeRelations()) {
    if (relation.op != SizeRelation::Op::Eq)
      continue;
    for (auto [symbol, value] :
         {std::pair{relation.lhs, relation.rhs}, {relation.rhs, relation.lhs}})
      if (symbol->kind() == SizeKind::Symbol && value->isConstant() &&
          symbol->value() < static_cast<int64_t>(symbols))
        pinned[symbol->value()] = true;
  }
  return std::all_of(pinned.begin(), pinned.end(), [](bool p) { return p; });
}

} // namespace

Capture CodeCache::capture(PyObject *function, const FrameInputs &inputs,
                           const std::string &name) const {
  DynamicPolicy policy;
  bool useless = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    policy = policy_;
    useless = symbolicUseless_;
  }
  policy.mode = options_.dynamic;
  bool symbolic = policy.mode == DynamicPolicy::Mode::Always ||
                  (policy.mode == DynamicPolicy::Mode::Automatic &&
                   !policy.learned.empty());
  // Tensors marked by kiln.mark_dynamic among the arguments.
  for (int i = 0; i < inputs.localCount && !symbolic &&
                  policy.mode != DynamicPolicy::Mode::Never;
       ++i) {
    PyObject *local = inputs.locals[i];
    symbolic = local && python::isTensor(local) &&
               (PyObject_HasAttrString(local, "_kiln_dynamic_dims") ||
                PyObject_HasAttrString(local, "_dynamo_dynamic_indices"));
  }
  if (symbolic && !useless) {
    try {
      Capture capture =
          captureFunction(function, inputs, !options_.fullgraph, &policy);
      if (!everySymbolPinned(capture))
        return capture;
      // Each later size would fail its guards and capture again.
      {
        std::lock_guard<std::mutex> lock(mutex_);
        symbolicUseless_ = true;
      }
      if (logEnabled("recompiles")) {
        std::string relations;
        for (const SizeRelation &relation : capture.guards.sizeRelations())
          relations += (relations.empty() ? "" : ", ") + relation.str();
        logArtifact("recompiles",
                    name +
                        ": the capture with dynamic shapes specialised "
                        "every size (" +
                        relations + "); static shapes from now on");
      }
    } catch (const Unsupported &error) {
      symbolicFailed(name, error.what());
    } catch (py::error_already_set &error) {
      symbolicFailed(name, error.what());
    }
  }
  return captureFunction(function, inputs, !options_.fullgraph);
}

void CodeCache::symbolicFailed(const std::string &name,
                               const std::string &reason) const {
  // It would fail the same way for each later size: those capture statically
  // at once.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    symbolicUseless_ = true;
  }
  if (logEnabled("recompiles"))
    logArtifact("recompiles", name + ": no capture with dynamic shapes (" +
                                  reason + "); static shapes from now on");
}

bool CodeCache::learnDynamicDims(const CacheEntry &entry) const {
  if (options_.dynamic != DynamicPolicy::Mode::Automatic)
    return false;
  std::shared_ptr<const EntryList> entries = this->entries();
  bool learned = false;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto &earlier : *entries) {
    for (const auto &[source, sizes] : earlier->inputSizes) {
      for (const auto &[newSource, newSizes] : entry.inputSizes) {
        if (newSource != source || newSizes.size() != sizes.size())
          continue;
        for (size_t d = 0; d < sizes.size(); ++d) {
          if (sizes[d] == newSizes[d] || newSizes[d] < 2)
            continue;
          if (!policy_.learned[source].insert(d).second)
            continue;
          learned = true;
          if (logEnabled("recompiles"))
            logArtifact("recompiles", source + " size " + std::to_string(d) +
                                          " changed (" +
                                          std::to_string(sizes[d]) + " -> " +
                                          std::to_string(newSizes[d]) +
                                          "): dynamic from now on");
        }
      }
    }
  }
  return learned;
}

void CodeCache::makeContinuation(CacheEntry &entry,
                                 const GraphBreak &graphBreak,
                                 const FrameInputs &inputs) const {
  py::list bound, nulls, iterated;
  for (int local : graphBreak.locals)
    bound.append(py::bool_(local >= 0));
  for (int item : graphBreak.stack)
    nulls.append(py::bool_(item < 0));
  for (GraphBreak::Iterated iterator : graphBreak.iterated)
    iterated.append(py::int_(static_cast<int>(iterator)));
  py::object globals = py::reinterpret_borrow<py::object>(inputs.globals);
  py::object closure = inputs.closure
                           ? py::reinterpret_borrow<py::object>(inputs.closure)
                           : py::none();
  py::object gradMode = graphBreak.gradMode
                            ? py::object(py::bool_(*graphBreak.gradMode))
                            : py::object(py::none());
  py::tuple made =
      py::module_::import("kiln._resume")
          .attr("continuation")(graphBreak.code, graphBreak.offset, bound,
                                nulls, globals, closure, gradMode, iterated);
  entry.continuation = made[0];
  for (py::handle code : made[1]) {
    entry.resumeCodes.push_back(py::reinterpret_borrow<py::object>(code));
    if (graphBreak.loopSteps > 0)
      frontend::allowLoopSteps(code.ptr(), options_,
                               static_cast<int>(graphBreak.loopSteps));
  }
  entry.continuationLocals = made[2].cast<size_t>();
  for (py::handle slot : made[3]) {
    int index = slot.cast<int>();
    if (index < 0 || index >= static_cast<int>(graphBreak.locals.size()) ||
        graphBreak.locals[index] < 0)
      throw Unsupported("a closure cell of the frame is unbound at the break");
    entry.continuationCells.push_back(index);
  }
  entry.globals = inputs.globals;
  skipCodeInHook(entry.continuation.attr("__code__").ptr());
}

py::dict CodeCache::info() const {
  py::list graphs, guards, runners, breaks, breakReasons;
  std::shared_ptr<const EntryList> entries = this->entries();
  // Graphs of this function and of the resume functions its breaks made
  // (captured by the frame hook, each resume code once).
  long graphCount = 0;
  std::vector<PyObject *> resumeCodes;
  for (const auto &entry : *entries) {
    graphs.append(entry->graphText);
    guards.append(entry->guards.str());
    runners.append(entry->runner->describe());
    ++graphCount;
    if (!entry->graphBreak)
      continue;
    const GraphBreak &graphBreak = *entry->graphBreak;
    py::dict item;
    item["reason"] = graphBreak.reason;
    item["location"] = graphBreak.location;
    item["instruction"] = graphBreak.instruction;
    item["resume"] = entry->resumeCodes.at(0);
    py::tuple resumes(entry->resumeCodes.size());
    for (size_t i = 0; i < entry->resumeCodes.size(); ++i)
      resumes[i] = entry->resumeCodes[i];
    item["resumes"] = resumes;
    breaks.append(item);
    breakReasons.append(py::str(graphBreak.reason));
    for (const py::object &code : entry->resumeCodes) {
      PyObject *resume = code.ptr();
      // A break inside a loop resumes in a function that breaks at the same
      // instruction again: its own resume code, counted once.
      static thread_local std::vector<PyObject *> counting;
      if (std::find(resumeCodes.begin(), resumeCodes.end(), resume) !=
              resumeCodes.end() ||
          std::find(counting.begin(), counting.end(), resume) != counting.end())
        continue;
      resumeCodes.push_back(resume);
      counting.push_back(resume);
      py::object resumed =
          py::reinterpret_steal<py::object>(codeCacheInfo(resume));
      counting.pop_back();
      if (!resumed)
        throw py::error_already_set();
      if (resumed.is_none())
        continue;
      graphCount += resumed["graph_count"].cast<long>();
      for (py::handle reason : resumed["break_reasons"])
        breakReasons.append(reason);
    }
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
  info["breaks"] = breaks;
  info["graph_count"] = py::int_(graphCount);
  info["break_reasons"] = breakReasons;
  return info;
}

void CodeCache::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::atomic_store(&entries_, std::shared_ptr<const EntryList>(
                                   std::make_shared<EntryList>()));
  runInCPython_ = false;
  fallbackReason_.clear();
  policy_ = DynamicPolicy();
  symbolicUseless_ = false;
}

} // namespace kiln::frontend
