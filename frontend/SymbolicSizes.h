// Reading torch's symbolic sizes (as kiln._symbolic describes them) into
// kiln's size expressions, with torch's symbols numbered as they are first
// met. Shared by the bytecode capture and the FX importer. Depends on
// ir/TensorMeta.h, pybind11.
#pragma once

#include "ir/TensorMeta.h"

#include <pybind11/pybind11.h>

#include <map>
#include <memory>
#include <string>

namespace kiln::frontend {

namespace py = pybind11;

class SymbolTable {
public:
  /// A size from kiln._symbolic.describe's form: ("int", v), ("sym",
  /// name), (op, operands...). Throws kiln::Unsupported for another op.
  SymSize sizeOf(py::handle description);
  /// The layout kiln._symbolic.layout describes (its fourth item), or null
  /// where that is None.
  std::shared_ptr<const SymbolicLayout> layoutOf(py::handle description);
  /// The hint meta and symbolic layout of a fake tensor (its sizes are not
  /// read as ints: that would specialise them).
  TensorMeta metaOf(py::handle fakeTensor, Device device);
  /// How many symbols have numbers.
  size_t size() const { return numbers_.size(); }

private:
  std::map<std::string, int64_t> numbers_;
};

} // namespace kiln::frontend
