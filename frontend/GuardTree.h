// The guard tree: every assumption a capture made, as checks on sources,
// evaluated in one pass before cached code runs. Sources are accessed once
// each (children read through their parent's value), and the same pass
// collects the graph's inputs. Depends on frontend/Source.h, ir/TensorMeta.h.
#pragma once

#include "frontend/Source.h"
#include "ir/TensorMeta.h"

#include <pybind11/pybind11.h>

#include <map>
#include <string>
#include <vector>

namespace kiln::frontend {

/// What a guarded call sees: the frame's arguments (by local index), its
/// globals and builtins, and the function's closure cells.
struct FrameInputs {
  PyObject *const *locals = nullptr;
  int localCount = 0;
  PyObject *globals = nullptr;  // dict
  PyObject *builtins = nullptr; // dict; null: found through the globals
  PyObject *closure = nullptr;  // tuple of cells, or null
};

struct GuardCheck {
  enum class Kind : uint8_t {
    TensorMatch,  // exact type, dtype, device, sizes, strides, requires_grad;
                  // sizes and strides of a symbolic layout bind or match the
                  // size symbols
    TypeIs,       // type(value) is expected type
    IdIs,         // value is the expected object (held by a weak reference)
    Equals,       // same type and == a constant
    Length,       // len(value) == n (type checked separately)
    DictKeys,     // list(value.keys()) == keys
    GradMode,     // torch.is_grad_enabled() == flag (source-less)
    DefaultDType, // torch.get_default_dtype() is expected (source-less)
    SameAs,       // value is the value of guard node `length` (an alias)
    NotSameAs,    // value is not the value of guard node `length`
    HasAttr,      // hasattr(value, `expected`) == flag
    Contains,     // (`expected` in value) == flag
  };
  Kind kind;
  py::object expected; // type / constant / weakref / keys tuple
  TensorMeta tensor;   // for TensorMatch
  bool requiresGrad = false;
  int64_t length = 0;
  bool flag = false;
};

class GuardTree {
public:
  /// Adds a check on `source` (null for the source-less GradMode and
  /// DefaultDType).
  void addCheck(const SourcePtr &source, GuardCheck check);
  /// Checks that `source` is the very object `other` is (two arguments that
  /// are one tensor: the graph reads it once).
  void addSameAs(const SourcePtr &source, const SourcePtr &other);
  /// Checks that `source` is not the object `other` is (an object written
  /// to and another of its class the capture read apart from it).
  void addDistinctFrom(const SourcePtr &source, const SourcePtr &other);
  /// Makes the value of `source` graph input number `slot` (slots in order).
  void addGraphInput(const SourcePtr &source);
  size_t graphInputCount() const { return graphInputs_.size(); }
  /// Where graph input `slot` is read from.
  const SourcePtr &graphInputSource(size_t slot) const {
    return nodes_[graphInputs_[slot]].source;
  }
  /// Makes the value of `source` read number `slot` (slots in order): what a
  /// graph break passes on from this call's inputs, unchecked.
  int addRead(const SourcePtr &source);

  /// Runs every check. On success fills `graphInputs` (new references) and,
  /// if given, `reads` and `symbols` (each size symbol's value in this
  /// call), and returns true; otherwise returns false and, if `failure` is
  /// given, says which check failed. Never raises: an access that fails is
  /// a miss.
  bool evaluate(const FrameInputs &frame, std::vector<py::object> &graphInputs,
                std::string *failure = nullptr,
                std::vector<py::object> *reads = nullptr,
                std::vector<int64_t> *symbols = nullptr) const;

  /// The capture used `count` size symbols (bound by symbolic tensor
  /// checks, each at least 2) and relied on `relations` between them.
  void setSizeRelations(int64_t symbolCount,
                        std::vector<SizeRelation> relations);
  const std::vector<SizeRelation> &sizeRelations() const { return relations_; }

  /// One line per check, for KILN_LOGS=guards.
  std::string str() const;
  size_t checkCount() const;

private:
  struct Node {
    SourcePtr source;
    int parent = -1; // -1: read from the frame
    std::vector<GuardCheck> checks;
  };
  int nodeFor(const SourcePtr &source);
  void addRelation(const SourcePtr &source, const SourcePtr &other,
                   GuardCheck::Kind kind);

  std::vector<Node> nodes_;
  std::map<std::string, int> nodeBySource_;
  std::vector<GuardCheck> globalChecks_;
  std::vector<int> graphInputs_; // node index per graph input
  std::vector<int> reads_;       // node index per read
  int64_t symbolCount_ = 0;
  std::vector<SizeRelation> relations_;
};

/// The check that a tensor still has this metadata.
GuardCheck tensorMatch(py::handle tensor, const TensorMeta &meta);
/// The check that an object is still this one; weak where possible.
GuardCheck identity(py::handle object);
GuardCheck typeIs(py::handle type);
/// The check that `key in value` is still `present`.
GuardCheck containsKey(py::handle key, bool present);
/// The check that hasattr(value, name) is still `present`.
GuardCheck hasAttribute(const std::string &name, bool present);
GuardCheck equalsConstant(py::handle constant);
/// The check that torch's default dtype is still the one it is now.
GuardCheck defaultDType();

} // namespace kiln::frontend
