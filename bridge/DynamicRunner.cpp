// The runner of a graph with size symbols: one specialised runner per set of
// symbol values, most recently used kept. Depends on bridge/, ir/Graph.h.
#include "bridge/DynamicRunner.h"

#include "backend/Pipeline.h"
#include "ir/Error.h"
#include "ir/Logging.h"

namespace kiln::python {

DynamicRunner::DynamicRunner(std::shared_ptr<Graph> graph,
                             OutputForm outputForm, std::string backend,
                             std::string eagerReason, std::string name,
                             std::string mode, bool checkInputs)
    : graph_(graph), outputForm_(outputForm), backend_(std::move(backend)),
      eagerReason_(std::move(eagerReason)), name_(std::move(name)),
      mode_(std::move(mode)), checkInputs_(checkInputs) {
  if (graph_->symbols().empty())
    throw Error("a dynamic runner needs a graph with size symbols");
  if (backend_ != "llvm" || !eagerReason_.empty())
    return;
  if (backend::Target::forGraph(*graph_).kind != backend::Target::Kind::Cpu) {
    symbolicRefusal_ = "the GPU code generator compiles fixed sizes";
  } else {
    // One compile for every size; where it cannot be (an op kiln lowers
    // only at fixed sizes is fine: torch runs it), each size gets its own.
    try {
      symbolic_ =
          std::make_unique<NativeRunner>(graph, outputForm_, checkInputs_);
    } catch (const std::exception &error) {
      // A compiler bug must not break the user's program either.
      symbolicRefusal_ = error.what();
    }
  }
  if (logEnabled("recompiles"))
    logArtifact(
        "recompiles",
        symbolic_
            ? "compiled " + name_ + " once for every size (" +
                  std::to_string(graph_->symbols().size()) + " size symbol(s))"
            : "compiling " + name_ + " for each size: " + symbolicRefusal_);
}

py::object
DynamicRunner::runWithSymbols(PyObject *const *inputs, size_t count,
                              const std::vector<int64_t> &symbols) const {
  if (symbolic_ && count == graph_->inputs().size())
    return symbolic_->runWithSymbols(inputs, count, symbols);
  return run(inputs, count);
}

py::object DynamicRunner::run(PyObject *const *inputs, size_t count) const {
  if (count != graph_->inputs().size())
    throw Error(name_ + ": expected " +
                std::to_string(graph_->inputs().size()) + " inputs, got " +
                std::to_string(count));
  if (symbolic_)
    return symbolic_->run(inputs, count);
  std::vector<int64_t> symbols;
  symbols.reserve(graph_->symbols().size());
  for (const SymbolBinding &binding : graph_->symbols()) {
    py::handle input(inputs[binding.input]);
    py::object size = input.attr("shape")[py::int_(binding.dim)];
    symbols.push_back(size.cast<int64_t>());
  }
  std::shared_ptr<GraphRunner> runner = runnerFor(symbols);
  return runner->run(inputs, count);
}

std::shared_ptr<GraphRunner>
DynamicRunner::runnerFor(const std::vector<int64_t> &symbols) const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = recent_.begin(); it != recent_.end(); ++it) {
      if (it->first != symbols)
        continue;
      recent_.splice(recent_.begin(), recent_, it);
      return recent_.front().second;
    }
  }
  // Made outside the lock: compiling may run Python (torch), and another
  // thread making the same one only costs time.
  std::shared_ptr<Graph> specialized = specializeGraph(*graph_, symbols);
  std::string values;
  for (size_t k = 0; k < symbols.size(); ++k)
    values += (k ? ", s" : "s") + std::to_string(k) + "=" +
              std::to_string(symbols[k]);
  if (logEnabled("recompiles"))
    logArtifact("recompiles",
                "specialising dynamic graph of " + name_ + " for " + values);
  std::shared_ptr<GraphRunner> runner =
      chooseGraphRunner(specialized, outputForm_, backend_, eagerReason_, name_,
                        /*checkInputs=*/false, mode_);
  std::lock_guard<std::mutex> lock(mutex_);
  ++made_;
  lastDescription_ = runner->describe() + " for " + values;
  recent_.emplace_front(symbols, runner);
  if (recent_.size() > kDynamicRunnerCacheSize)
    recent_.pop_back();
  return runner;
}

size_t DynamicRunner::specializations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return made_;
}

std::string DynamicRunner::describe() const {
  if (symbolic_)
    return "dynamic (" + std::to_string(graph_->symbols().size()) +
           " size symbol(s), compiled once for every size): " +
           symbolic_->describe();
  std::lock_guard<std::mutex> lock(mutex_);
  std::string text = "dynamic (" + std::to_string(graph_->symbols().size()) +
                     " size symbol(s), " + std::to_string(made_) +
                     " specialisation(s))";
  if (!lastDescription_.empty())
    text += "; last: " + lastDescription_;
  return text;
}

} // namespace kiln::python
