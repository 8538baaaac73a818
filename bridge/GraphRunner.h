// What runs a captured graph: the eager runner (every node through torch) or
// the native runner (kiln's compiled kernels plus torch for externs).
// Depends on pybind11.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::python {

namespace py = pybind11;

class GraphRunner {
public:
  virtual ~GraphRunner() = default;
  /// Runs the graph on `count` input tensors (one per graph input) and
  /// returns its outputs in the runner's output form. Needs the GIL.
  virtual py::object run(PyObject *const *inputs, size_t count) const = 0;
  /// The same, where the caller has read the values of the graph's size
  /// symbols (kiln's guards bind them from the inputs' sizes): runners of a
  /// graph whose sizes vary take them instead of reading the sizes again.
  virtual py::object runWithSymbols(PyObject *const *inputs, size_t count,
                                    const std::vector<int64_t> &) const {
    return run(inputs, count);
  }
  /// "eager" or "native", and what ran how, for kiln.cache_info and logs.
  virtual std::string describe() const = 0;
};

} // namespace kiln::python
