// Conversions between Python objects and kiln's TensorMeta and Argument.
// Depends on ir/ and pybind11; torch only through its Python API.
#include "bridge/PythonConversion.h"

#include "ir/Error.h"

#include <pybind11/stl.h>

#include <cstring>

namespace kiln::python {

const TorchHandles &TorchHandles::get() {
  // Leaked on purpose: Python objects must not be released after the
  // interpreter has finalised. Importing torch may let another thread run,
  // which then waits for the handles without holding the GIL (a plain
  // static would deadlock: it waits holding the GIL the importer needs).
  PYBIND11_CONSTINIT static py::gil_safe_call_once_and_store<TorchHandles *>
      handles;
  return *handles
              .call_once_and_store_result([] {
                auto *h = new TorchHandles();
                h->torch = py::module_::import("torch");
                h->tensorType = h->torch.attr("Tensor");
                h->dtypeType = h->torch.attr("dtype");
                h->deviceType = h->torch.attr("device");
                h->layoutType = h->torch.attr("layout");
                h->memoryFormatType = h->torch.attr("memory_format");
                for (int i = 0; i < kNumDTypes; ++i)
                  h->dtypes[i] = h->torch.attr(
                      std::string(dtypeName(static_cast<DType>(i))).c_str());
                h->opsAten = h->torch.attr("ops").attr("aten");
                return h;
              })
              .get_stored();
}

bool isTensor(py::handle object) {
  // By type, not isinstance: that reads `__class__`, which runs a class's
  // own __getattribute__ (Python code, in the middle of a guard or capture).
  return PyObject_TypeCheck(
      object.ptr(),
      reinterpret_cast<PyTypeObject *>(TorchHandles::get().tensorType.ptr()));
}

DType dtypeFromTorch(py::handle dtype) {
  const TorchHandles &torch = TorchHandles::get();
  for (int i = 0; i < kNumDTypes; ++i)
    if (dtype.is(torch.dtypes[i]))
      return static_cast<DType>(i);
  throw Unsupported(
      "unsupported dtype " + py::str(dtype).cast<std::string>() +
      ": kiln supports bool, integer, floating and complex types");
}

py::object dtypeToTorch(DType dtype) {
  return TorchHandles::get().dtypes[static_cast<int>(dtype)];
}

Device deviceFromTorch(py::handle device) {
  return Device::parse(py::str(device).cast<std::string>());
}

py::object deviceToTorch(const Device &device) {
  return TorchHandles::get().deviceType(device.str());
}

MemoryFormat memoryFormatFromTorch(py::handle format) {
  const TorchHandles &torch = TorchHandles::get();
  static constexpr MemoryFormat kFormats[] = {
      MemoryFormat::Contiguous, MemoryFormat::Preserve,
      MemoryFormat::ChannelsLast, MemoryFormat::ChannelsLast3d};
  for (MemoryFormat candidate : kFormats)
    if (format.is(
            torch.torch.attr(std::string(memoryFormatName(candidate)).c_str())))
      return candidate;
  throw Unsupported("unsupported memory format " +
                    py::str(format).cast<std::string>());
}

py::object memoryFormatToTorch(MemoryFormat format) {
  return TorchHandles::get().torch.attr(
      std::string(memoryFormatName(format)).c_str());
}

namespace {

int64_t toInt64(py::handle object, const char *what) {
  if (!PyLong_Check(object.ptr()))
    throw Unsupported(std::string("symbolic or non-integer ") + what + " (" +
                      py::repr(object).cast<std::string>() +
                      "): kiln needs static shapes here");
  return object.cast<int64_t>();
}

} // namespace

char *dataPointer(PyObject *tensor) {
  static PyObject *name = PyUnicode_InternFromString("data_ptr");
  PyObject *address = PyObject_CallMethodNoArgs(tensor, name);
  if (!address)
    throw py::error_already_set();
  auto value = PyLong_AsUnsignedLongLong(address);
  Py_DECREF(address);
  return reinterpret_cast<char *>(static_cast<uintptr_t>(value));
}

namespace {

py::object attribute(PyObject *object, PyObject *name) {
  PyObject *value = PyObject_GetAttr(object, name);
  if (!value)
    throw py::error_already_set();
  return py::reinterpret_steal<py::object>(value);
}

py::object callMethod(PyObject *object, PyObject *name) {
  PyObject *value = PyObject_CallMethodNoArgs(object, name);
  if (!value)
    throw py::error_already_set();
  return py::reinterpret_steal<py::object>(value);
}

std::vector<int64_t> integers(const py::object &sequence, const char *what) {
  std::vector<int64_t> values;
  if (PyTuple_Check(sequence.ptr())) { // torch.Size and stride()'s tuple
    Py_ssize_t count = PyTuple_GET_SIZE(sequence.ptr());
    values.reserve(static_cast<size_t>(count));
    for (Py_ssize_t i = 0; i < count; ++i)
      values.push_back(toInt64(PyTuple_GET_ITEM(sequence.ptr(), i), what));
    return values;
  }
  for (py::handle item : sequence)
    values.push_back(toInt64(item, what));
  return values;
}

} // namespace

// This runs for extern results and checked inputs on every call: attribute
// names interned, torch.strided looked up once, the device read from
// is_cuda/get_device() rather than by printing a torch.device.
TensorMeta tensorMetaOf(py::handle tensor) {
  static PyObject *layoutName = PyUnicode_InternFromString("layout");
  static PyObject *dtypeName = PyUnicode_InternFromString("dtype");
  static PyObject *shapeName = PyUnicode_InternFromString("shape");
  static PyObject *strideName = PyUnicode_InternFromString("stride");
  static PyObject *offsetName = PyUnicode_InternFromString("storage_offset");
  static PyObject *isCudaName = PyUnicode_InternFromString("is_cuda");
  static PyObject *isCpuName = PyUnicode_InternFromString("is_cpu");
  static PyObject *getDeviceName = PyUnicode_InternFromString("get_device");
  static PyObject *deviceName = PyUnicode_InternFromString("device");
  // Kept for the process (a static py::object would outlive the
  // interpreter).
  static PyObject *strided =
      py::object(TorchHandles::get().torch.attr("strided")).release().ptr();
  PyObject *object = tensor.ptr();
  py::object layout = attribute(object, layoutName);
  if (layout.ptr() != strided)
    throw Unsupported(
        "only strided (dense) tensors are supported, got layout " +
        py::str(layout).cast<std::string>());
  TensorMeta meta;
  meta.dtype = dtypeFromTorch(attribute(object, dtypeName));
  if (attribute(object, isCudaName).ptr() == Py_True) {
    meta.device = {DeviceType::CUDA,
                   static_cast<int>(toInt64(callMethod(object, getDeviceName),
                                            "device index"))};
  } else if (attribute(object, isCpuName).ptr() == Py_True) {
    meta.device = {DeviceType::CPU, -1};
  } else {
    meta.device = deviceFromTorch(attribute(object, deviceName));
  }
  meta.sizes = integers(attribute(object, shapeName), "size");
  meta.strides = integers(callMethod(object, strideName), "stride");
  meta.storageOffset =
      toInt64(callMethod(object, offsetName), "storage offset");
  return meta;
}

std::shared_ptr<ConstantData> constantDataOf(py::handle tensor) {
  TensorMeta meta = tensorMetaOf(tensor);
  if (meta.device.type == DeviceType::Meta)
    throw Unsupported("a tensor on the meta device has no data to copy");
  PYBIND11_CONSTINIT static py::gil_safe_call_once_and_store<PyObject *>
      fakeTensorType;
  fakeTensorType.call_once_and_store_result([] {
    py::object type =
        py::module_::import("torch._subclasses.fake_tensor").attr("FakeTensor");
    return type.release().ptr();
  });
  if (py::isinstance(tensor, py::handle(fakeTensorType.get_stored())))
    throw Unsupported("a fake tensor has no data to copy");
  py::object host = tensor.attr("detach")()
                        .attr("resolve_conj")()
                        .attr("resolve_neg")()
                        .attr("cpu")()
                        .attr("contiguous")();
  auto data = std::make_shared<ConstantData>();
  data->meta = TensorMeta(meta.dtype, meta.sizes, meta.device);
  data->bytes.resize(static_cast<size_t>(meta.numel() * itemSize(meta.dtype)));
  if (!data->bytes.empty()) {
    auto address = host.attr("data_ptr")().cast<uintptr_t>();
    std::memcpy(data->bytes.data(), reinterpret_cast<const void *>(address),
                data->bytes.size());
  }
  return data;
}

Argument
argumentFromPython(py::handle object,
                   const std::function<Value *(py::handle)> &tensorValue,
                   const std::function<Value *(py::handle)> &valueOf) {
  if (valueOf)
    if (Value *value = valueOf(object))
      return value;
  if (object.is_none())
    return Argument::none();
  if (PyBool_Check(object.ptr()))
    return object.cast<bool>();
  if (PyLong_Check(object.ptr()))
    return object.cast<int64_t>();
  if (PyFloat_Check(object.ptr()))
    return object.cast<double>();
  if (PyUnicode_Check(object.ptr()))
    return object.cast<std::string>();
  const TorchHandles &torch = TorchHandles::get();
  if (isTensor(object))
    return tensorValue(object);
  if (py::isinstance(object, torch.dtypeType))
    return dtypeFromTorch(object);
  if (py::isinstance(object, torch.deviceType))
    return deviceFromTorch(object);
  if (py::isinstance(object, torch.memoryFormatType))
    return memoryFormatFromTorch(object);
  if (py::isinstance(object, torch.layoutType)) {
    if (object.is(torch.torch.attr("strided")))
      return Layout::Strided;
    throw Unsupported("only the strided layout is supported");
  }
  if (PyList_Check(object.ptr()) || PyTuple_Check(object.ptr())) {
    py::sequence items = py::reinterpret_borrow<py::sequence>(object);
    std::vector<Value *> graphValues;
    bool anyTensor = false, allBool = items.size() > 0, anyFloat = false;
    for (py::handle item : items) {
      Value *value = valueOf ? valueOf(item) : nullptr;
      graphValues.push_back(value);
      anyTensor |= value || isTensor(item) || item.is_none();
      allBool &= PyBool_Check(item.ptr());
      anyFloat |= PyFloat_Check(item.ptr());
    }
    if (anyTensor) {
      std::vector<Value *> values;
      size_t index = 0;
      for (py::handle item : items) {
        if (Value *value = graphValues[index++])
          values.push_back(value);
        else if (item.is_none())
          values.push_back(nullptr);
        else if (isTensor(item))
          values.push_back(tensorValue(item));
        else
          throw Unsupported("a list mixing tensors and other objects");
      }
      return values;
    }
    if (allBool) {
      std::vector<bool> values;
      for (py::handle item : items)
        values.push_back(item.cast<bool>());
      return values;
    }
    if (anyFloat) {
      std::vector<double> values;
      for (py::handle item : items)
        values.push_back(item.cast<double>());
      return values;
    }
    std::vector<int64_t> values;
    for (py::handle item : items)
      values.push_back(toInt64(item, "list element"));
    return values;
  }
  throw Unsupported("cannot represent the argument " +
                    py::repr(object).cast<std::string>() + " of type " +
                    py::str(py::type::of(object)).cast<std::string>());
}

OutputForm outputFormFromName(const std::string &name) {
  if (name == "tuple")
    return OutputForm::Tuple;
  if (name == "list")
    return OutputForm::List;
  if (name == "single")
    return OutputForm::Single;
  throw Error("unknown output form '" + name +
              "': expected 'tuple', 'list' or 'single'");
}

std::string_view outputFormName(OutputForm form) {
  switch (form) {
  case OutputForm::Tuple:
    return "tuple";
  case OutputForm::List:
    return "list";
  case OutputForm::Single:
    return "single";
  }
  return "?";
}

py::object
argumentToPython(const Argument &argument,
                 const std::function<py::object(Value *)> &tensorObject) {
  using Kind = Argument::Kind;
  switch (argument.kind()) {
  case Kind::None:
    return py::none();
  case Kind::Bool:
    return py::bool_(argument.toBool());
  case Kind::Int:
    return py::int_(argument.toInt());
  case Kind::Double:
    return py::float_(argument.toDouble());
  case Kind::String:
    return py::str(argument.toString());
  case Kind::IntList:
    return py::cast(argument.toIntList());
  case Kind::DoubleList:
    return py::cast(argument.toDoubleList());
  case Kind::BoolList:
    return py::cast(argument.toBoolList());
  case Kind::DType:
    return dtypeToTorch(argument.toDType());
  case Kind::Device:
    return deviceToTorch(argument.toDevice());
  case Kind::Layout:
    return TorchHandles::get().torch.attr("strided");
  case Kind::MemoryFormat:
    return memoryFormatToTorch(argument.toMemoryFormat());
  case Kind::Tensor:
    return tensorObject(argument.toTensor());
  case Kind::TensorList: {
    py::list items;
    for (Value *value : argument.toTensorList())
      items.append(value ? tensorObject(value) : py::none());
    return items;
  }
  }
  throw Error("unknown argument kind");
}

} // namespace kiln::python
