// kiln._C.CompiledFunction: the callable kiln.compile returns for a Python
// function or method. Depends on pybind11.
#pragma once

#include <pybind11/pybind11.h>

#include <vector>

namespace kiln::frontend {

/// Binds a call's arguments (`self` first where given) to the parameters of
/// `function`'s code as CPython would, into `locals` (borrowed, or held in
/// `owned`). Returns false where the call does not bind.
bool bindCallArguments(PyObject *function, PyObject *self,
                       PyObject *const *args, size_t nargs, PyObject *kwnames,
                       std::vector<PyObject *> &locals,
                       std::vector<pybind11::object> &owned);

/// Adds the CompiledFunction type to `module`.
void defineCompiledFunction(pybind11::module_ &module);
/// Adds capture_for_export (frontend/ExportCapture.cpp) to `module`.
void defineExportCapture(pybind11::module_ &module);

} // namespace kiln::frontend
