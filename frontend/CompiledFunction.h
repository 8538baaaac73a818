// kiln._C.CompiledFunction: the callable kiln.compile returns for a Python
// function or method. Depends on pybind11.
#pragma once

#include <pybind11/pybind11.h>

namespace kiln::frontend {

/// Adds the CompiledFunction type to `module`.
void defineCompiledFunction(pybind11::module_ &module);

} // namespace kiln::frontend
