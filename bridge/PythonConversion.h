// Conversions between Python objects (torch tensors, dtypes, devices,
// numbers, lists) and kiln's TensorMeta and Argument, without linking
// libtorch: torch is only reached through its Python API.
// Depends on ir/ and pybind11.
#pragma once

#include "ir/Argument.h"
#include "ir/Graph.h"
#include "ir/TensorMeta.h"

#include <functional>
#include <memory>
#include <pybind11/pybind11.h>

namespace kiln::python {

namespace py = pybind11;

/// Cached handles to torch's Python objects; imports torch on first use.
struct TorchHandles {
  py::object torch;
  py::object tensorType;
  py::object dtypeType;
  py::object deviceType;
  py::object layoutType;
  py::object memoryFormatType;
  py::object dtypes[kNumDTypes]; // torch.float32, ... by kiln::DType
  py::object opsAten;            // torch.ops.aten

  static const TorchHandles &get();
};

/// Calls the torch function of no arguments at `Path` (attribute names
/// under `torch`, null-terminated), looked up once per Path: its result as
/// a new reference, or null (the error cleared) where the call failed. For
/// the state per-call guards read (is_grad_enabled, get_default_dtype).
template <const char *const *Path> PyObject *callTorchState() {
  // The lookup imports torch: another thread waits for it without the GIL.
  PYBIND11_CONSTINIT static py::gil_safe_call_once_and_store<PyObject *>
      function;
  PyObject *callable = function
                           .call_once_and_store_result([] {
                             py::object object = TorchHandles::get().torch;
                             for (const char *const *name = Path; *name; ++name)
                               object = object.attr(*name);
                             return object.release().ptr();
                           })
                           .get_stored();
  PyObject *result = PyObject_CallNoArgs(callable);
  if (!result)
    PyErr_Clear();
  return result;
}

bool isTensor(py::handle object);
DType dtypeFromTorch(py::handle dtype);
py::object dtypeToTorch(DType dtype);
Device deviceFromTorch(py::handle device);
py::object deviceToTorch(const Device &device);
MemoryFormat memoryFormatFromTorch(py::handle format);
py::object memoryFormatToTorch(MemoryFormat format);

/// A tensor's dtype, device, sizes, strides and storage offset.
TensorMeta tensorMetaOf(py::handle tensor);

/// tensor.data_ptr(), called without attribute lookup (per-call paths).
char *dataPointer(PyObject *tensor);

/// A copy of a tensor's data as a graph constant: contiguous, on the host,
/// its metadata keeping the tensor's device. Throws Unsupported for tensors
/// without data (meta, fake).
std::shared_ptr<ConstantData> constantDataOf(py::handle tensor);

/// Converts a Python argument of an ATen call. `tensorValue` maps each tensor
/// to its graph value. `valueOf`, where given, is asked first about every
/// object (also inside lists): it returns the graph value an object stands
/// for (an FX node, a Python handle of a kiln value) or null for ordinary
/// objects. Throws kiln::Unsupported for objects kiln cannot represent
/// (symbolic sizes, complex numbers, generators, ...).
Argument
argumentFromPython(py::handle object,
                   const std::function<Value *(py::handle)> &tensorValue,
                   const std::function<Value *(py::handle)> &valueOf = {});

/// How a compiled function hands back a graph's outputs: as a tuple, as a
/// list, or (for a graph with one output) the output itself.
enum class OutputForm : uint8_t { Tuple, List, Single };

/// "tuple", "list", "single"; throws Error for other names.
OutputForm outputFormFromName(const std::string &name);
std::string_view outputFormName(OutputForm form);

/// Converts a non-tensor argument back to Python (for calling torch).
/// Tensor arguments are the caller's business: `tensorObject` maps values.
py::object
argumentToPython(const Argument &argument,
                 const std::function<py::object(Value *)> &tensorObject);

} // namespace kiln::python
