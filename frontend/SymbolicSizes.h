// Reading torch's symbolic sizes (as kiln._symbolic describes them) into
// kiln's size expressions, with torch's symbols numbered as they are first
// met. Shared by the bytecode capture and the FX importer. Depends on
// ir/Graph.h, pybind11.
#pragma once

#include "ir/Graph.h"

#include <pybind11/pybind11.h>

#include <map>
#include <memory>
#include <string>

namespace kiln::frontend {

namespace py = pybind11;

class SymbolTable {
public:
  /// The kiln._symbolic module.
  static const py::module_ &module();
  /// A size from kiln._symbolic.describe's form: ("int", v), ("sym",
  /// name), (op, operands...). Throws kiln::Unsupported for another op.
  SymSize sizeOf(py::handle description);
  /// The layout kiln._symbolic.layout describes (its fourth item), or null
  /// where that is None.
  std::shared_ptr<const SymbolicLayout> layoutOf(py::handle description);
  /// The hint meta and symbolic layout of a fake tensor (its sizes are not
  /// read as ints: that would specialise them).
  TensorMeta metaOf(py::handle fakeTensor, Device device);
  /// The example's value and the expression of an int or SymInt; throws
  /// kiln::Unsupported for a size kiln cannot hold (an unbacked SymInt,
  /// another expression).
  std::pair<int64_t, SymSize> sizeOfValue(py::handle value);
  /// Binds each size of graph input `input` that is a symbol met for the
  /// first time to that dimension (Graph::addSymbol).
  void bindInputSymbols(Graph &graph, const Value &input);
  /// How many symbols have numbers.
  size_t size() const { return numbers_.size(); }

private:
  std::map<std::string, int64_t> numbers_;
};

} // namespace kiln::frontend
