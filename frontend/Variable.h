// Variable trackers: what the symbolic evaluator knows about each value on
// its stack and in its locals. One struct with a kind tag keeps the set small;
// `object` holds the real Python object wherever one exists.
// Depends on frontend/Source.h, ir/Graph.h.
#pragma once

#include "frontend/Source.h"
#include "ir/Graph.h"

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

namespace kiln::frontend {

struct Variable;
using VariablePtr = std::shared_ptr<Variable>;

struct Variable {
  enum class Kind : uint8_t {
    Tensor,       // a graph value
    Constant,     // an immutable Python value: numbers, str, None, dtypes,
                  // tuples of constants, ranges, slices, torch.Size
    Tuple,        // items
    List,         // items (mutable)
    Dict,         // keys (Python constants) and items (mutable)
    Iterator,     // items, position
    Null,         // the NULL a call sequence pushes
    Function,     // a Python function to inline: object, or a nested one
                  // (code, defaults in items, closure cells in cells)
    Method,       // a function bound to self (items[0]); tensor methods and
                  // container methods by name with a null object
    Callable,     // any other callable object (torch functions, builtins)
    Module,       // an nn.Module
    PythonModule, // a Python module object (torch, math, a user module)
    Object,       // any other object: attributes are read, never written
    Cell,         // a closure cell created in captured code (items[0])
    GradContext,  // torch.no_grad() / enable_grad() / set_grad_enabled(b)
    GradRestore,  // the __exit__ of a GradContext
    Super,        // super(): object is the class, items[0] self
    DictView,     // keys()/values()/items() of a Dict made in the frame
                  // (items[0]), by name: live, as Python's views are
    Instance,     // an object of a Python class made in the frame: object
                  // is its class, items[0] its __dict__ (a Dict), items[1]
                  // its contents for a dict subclass (a Dict)
    Set,          // a set made in the frame: object is a real set of its
                  // constant elements, changed as the code changes it
  };

  Kind kind;
  SourcePtr source;  // where it came from, when it came from the frame
  py::object object; // the Python object, where there is one
  Value *tensor = nullptr;
  std::vector<VariablePtr> items;
  std::vector<py::object> keys; // Dict keys
  std::string name;             // Method: the attribute name
  size_t position = 0;          // Iterator
  bool flag = false;  // GradContext / GradRestore: grad mode to set; Dict:
                      // an OrderedDict's contents (move_to_end, popitem(last))
  py::object code;    // nested Function: code object
  py::object globals; // nested Function: its globals
  std::vector<VariablePtr> cells; // nested Function: closure cells
  /// A Cell made in the frame that a class defined in the frame closes
  /// over (its methods name the class): the real cell they read, kept
  /// equal to items[0], which must be a constant.
  py::object realCell;
  py::object kwdefaults; // nested Function: kw-only defaults dict or None
  /// Tensor read from a source: its exact class (Tensor, Parameter,
  /// Buffer), which its guard checks; null for tensors the graph computes.
  py::object tensorClass;
  /// An Iterator an enumerate, zip or reversed made: what it reads (Lists
  /// and Iterators; other iterables as an Iterator over their items), where
  /// each of those stood when it was made, and an enumerate's start. A
  /// graph break with it live makes it again from these
  /// (kiln._resume.iterator_at).
  struct Recipe {
    std::string how; // "enumerate", "zip" or "reversed"
    std::vector<VariablePtr> sources;
    std::vector<size_t> from;
    int64_t start = 0;
  };
  std::shared_ptr<const Recipe> recipe;
  /// A container the call itself made (the *args tuple and **kwargs dict of
  /// the compiled function): guarded through its source, yet mutating it is
  /// no side effect the caller could see.
  bool ownedByFrame = false;

  explicit Variable(Kind kind) : kind(kind) {}

  static VariablePtr make(Kind kind) {
    return std::make_shared<Variable>(kind);
  }
  static VariablePtr constant(py::object value) {
    auto variable = make(Kind::Constant);
    variable->object = std::move(value);
    return variable;
  }
  static VariablePtr ofTensor(Value *value) {
    auto variable = make(Kind::Tensor);
    variable->tensor = value;
    return variable;
  }
  static VariablePtr sequence(Kind kind, std::vector<VariablePtr> items) {
    auto variable = make(kind);
    variable->items = std::move(items);
    return variable;
  }
  bool is(Kind k) const { return kind == k; }
};

} // namespace kiln::frontend
