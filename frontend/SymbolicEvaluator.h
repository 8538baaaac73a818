// The symbolic evaluator: runs a Python function's bytecode over variable
// trackers instead of values. Tensor work becomes graph nodes, plain Python
// on constants is evaluated, user functions and nn.Module.forward are
// inlined, and every assumption becomes a guard. Anything it cannot capture
// raises kiln::Unsupported naming the construct and source line.
// Depends on frontend/, ir/, bridge/PythonConversion.h, pybind11.
#pragma once

#include "frontend/GuardTree.h"
#include "frontend/Variable.h"
#include "ir/Graph.h"

#include <pybind11/pybind11.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace kiln::frontend {

/// How to build a captured function's return value from its graph's
/// outputs: the Python structure with tensors replaced by output indices.
struct OutputTemplate {
  enum class Kind : uint8_t { Tensor, Constant, Tuple, List, Dict, Struct };
  Kind kind = Kind::Constant;
  int index = 0;       // Tensor: graph output index
  py::object constant; // Constant: the object; Struct: the type to call
  std::vector<OutputTemplate> items;
  std::vector<py::object> keys; // Dict

  /// `outputs` holds the graph's results, one per graph output.
  py::object build(PyObject *const *outputs) const;
};

/// One value a graph break passes on, built from the graph's outputs, this
/// call's reads (GuardTree::addRead) and values built before it.
struct RebuildStep {
  enum class Kind : uint8_t {
    Output,   // graph output `index`
    Read,     // read `index` of this call
    Constant, // `object`
    Tuple,    // of the values `items`
    List,
    Dict,        // `keys` to the values `items`
    Struct,      // `object` (a structseq type) called with a tuple of `items`
    BoundMethod, // `object` (a function) bound to the value items[0]
    Attribute,   // getattr(value items[0], `name`)
    Instance,    // `object` (a class) made with its __new__; its first
                 // `index` items set as attributes named by `keys`, the rest
                 // as its builtin dict base's items under the other keys
    Set,         // a copy of the set `object` (of constants)
    Cell,        // a new closure cell; given the value items[0] (if any)
                 // once every value is built (a function in it may close
                 // over the cell itself)
  };
  Kind kind = Kind::Constant;
  int index = 0;
  py::object object;
  std::vector<int> items;
  std::vector<py::object> keys;
  std::string name;
  /// Instance of a dict subclass: its builtin base's __setitem__, found
  /// once when the plan is made.
  py::object setItem;
};

/// A write to an object from outside the graph that the capture modelled
/// and a cache hit replays after the graph: setattr(values[target], name,
/// values[value]), in the order the code made them, or a list's or dict's
/// final contents.
struct SideEffect {
  int target = 0;
  std::string name;
  int value = 0;
  /// Instead of setattr: the list or dict values[target] (the caller's)
  /// given the contents of values[value] (`target[:] = value`;
  /// `target.clear(); target.update(value)`), the state the capture left.
  bool contents = false;
};

/// What a cache hit builds from the graph's outputs after it runs (values
/// in build order, each referring only to earlier ones) and the side
/// effects it then replays.
struct RebuildPlan {
  std::vector<RebuildStep> steps;
  std::vector<SideEffect> effects;
  /// A whole-frame capture: the step that is the function's result.
  int result = -1;

  /// The values, in the order of `steps`, after applying `effects`.
  std::vector<py::object> rebuild(PyObject *const *outputs,
                                  const std::vector<py::object> &reads) const;
};

/// Where a capture stopped at a graph break: the frame's state before the
/// instruction at `offset`, which runs in CPython, and everything a cache
/// hit needs to rebuild that state.
struct GraphBreak : RebuildPlan {
  py::object code; // the captured frame's code
  int offset = 0;  // of the instruction that runs in CPython
  std::string instruction;
  std::string location;    // "file.py:12"
  std::string reason;      // why the instruction could not be captured
  std::vector<int> locals; // value per local slot; -1: unbound
  std::vector<int> stack;  // value per stack item, bottom first; -1: NULL
  /// Per stack item: whether it is a loop's iterator, and how it leaves
  /// (kiln._resume rebuilds it in the resume function).
  enum class Iterated : int {
    No = 0,
    /// the items still to come, as a tuple the resume function iterates
    AsTuple = 1,
    /// a state (kiln._resume.iterator_at) the resume function makes the
    /// iterator again from: a list's own iterator at the position reached,
    /// which reads the list as it is then; an enumerate, zip or reversed
    /// over such iterators
    AsState = 2,
  };
  std::vector<Iterated> iterated;
  /// How many loop steps may still break here: the product over the live
  /// loops of their items left plus one (0: no loop is live).
  size_t loopSteps = 0;
  /// The grad mode at the break where a grad-mode block (or a call) set it
  /// apart from the call's: the continuation sets it before the
  /// instruction (the graph leaves grad mode as the call found it).
  std::optional<bool> gradMode;
};

struct Capture {
  std::shared_ptr<Graph> graph;
  GuardTree guards;
  OutputTemplate output;
  /// Set when the whole frame was captured and it writes to objects from
  /// outside: builds the result and replays the writes (`output` is then
  /// unused).
  std::shared_ptr<const RebuildPlan> replay;
  /// Set when the capture ends at a graph break (`output` is then unused).
  std::shared_ptr<const GraphBreak> graphBreak;
  /// Human-readable notes (ops kept as externs and why), for the logs.
  std::vector<std::string> notes;
  /// The grad mode the frame leaves behind where it differs from the one it
  /// found (an unbalanced torch.set_grad_enabled, a resume function leaving
  /// a grad-mode block): set after the graph, which itself ends balanced.
  std::optional<bool> finalGradMode;
};

/// Which input dimensions a capture makes symbolic (dynamic shapes).
/// Sizes 0 and 1 never are; `kiln.mark_static` dims never are; under
/// Automatic and Always, `kiln.mark_dynamic` dims (and torch's own marks)
/// are.
struct DynamicPolicy {
  enum class Mode : uint8_t {
    Automatic, // dims seen to change between captures (`learned`)
    Always,    // every dim of tensors that are not parameters or buffers
    Never,
  };
  Mode mode = Mode::Automatic;
  /// Dims by the source of the tensor ("L['x']").
  std::map<std::string, std::set<int64_t>> learned;
};

/// Captures one call of `function` with the given frame inputs (arguments
/// already bound to the code's locals). With `allowBreaks`, what cannot be
/// captured ends the capture at a graph break where the frame's state can be
/// rebuilt; otherwise (and where it cannot) throws kiln::Unsupported. With
/// `dynamic`, the capture traces on fake tensors whose dims that policy
/// names are symbolic: the graph has size symbols (Graph::symbols) and the
/// guards bind them and check the relations the capture relied on; what
/// such a capture cannot do (a size returned to Python or live at a graph
/// break) throws kiln::Unsupported.
Capture captureFunction(py::handle function, const FrameInputs &inputs,
                        bool allowBreaks = false,
                        const DynamicPolicy *dynamic = nullptr);

} // namespace kiln::frontend
