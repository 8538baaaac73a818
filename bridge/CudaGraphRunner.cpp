// mode="reduce-overhead": record a graph's GPU work once with
// torch.cuda.graph, replay it on later calls.
// Depends on bridge/CudaGraphRunner.h, bridge/PythonConversion.h, ir/,
// pybind11.
#include "bridge/CudaGraphRunner.h"

#include "bridge/PythonConversion.h"
#include "bridge/TorchCall.h"
#include "ir/Logging.h"

namespace kiln::python {

namespace {

// A parameter that moved records again; past this many recordings the
// graph runs plain.
constexpr int kMaxRecordings = 4;

// Follows views (transpose, reshape, slices, …) back to what they alias.
const Node *aliasRoot(const Value *value) {
  const Node *node = value->producer();
  while (node->schema() && node->schema()->isView()) {
    const Value *base = nullptr;
    for (const Argument &argument : node->arguments())
      if (argument.isTensor()) {
        base = argument.toTensor();
        break;
      }
    if (!base)
      break;
    node = base->producer();
  }
  return node;
}

// Copies of a run's tensors, in the same structure (tuple, list, tensor).
py::object copyOut(py::handle outputs) {
  if (isTensor(outputs))
    return outputs.attr("clone")();
  if (PyTuple_Check(outputs.ptr()) || PyList_Check(outputs.ptr())) {
    bool tuple = PyTuple_Check(outputs.ptr());
    py::list items;
    for (py::handle item : outputs)
      items.append(copyOut(item));
    return tuple ? py::object(py::tuple(items)) : py::object(items);
  }
  return py::reinterpret_borrow<py::object>(outputs);
}

} // namespace

std::string cudaGraphRefusal(const Graph &graph) {
  int device = -1;
  for (const Value *input : graph.inputs()) {
    const Device &where = input->meta().device;
    if (where.type != DeviceType::CUDA)
      return "input " + input->name() + " is on " + where.str() +
             ", not the GPU (a recording would keep its value)";
    if (device >= 0 && where.index != device)
      return "its inputs are on several GPUs";
    device = where.index;
  }
  if (device < 0)
    return "it has no GPU input";
  for (const auto &node : graph.nodes())
    if (node->writesArguments())
      return node->schema()->qualifiedName() +
             " writes its argument (a recording would write its own copy of "
             "the caller's tensor)";
  for (const Argument &output : graph.outputs()) {
    std::vector<Value *> values;
    if (output.isTensor())
      values.push_back(output.toTensor());
    else if (output.isTensorList())
      values = output.toTensorList();
    for (const Value *value : values) {
      Node::Kind root = aliasRoot(value)->kind();
      if (root == Node::Kind::Input || root == Node::Kind::Constant)
        return "output " + value->name() +
               " is an input or a constant or a view of one (a replay "
               "returns copies)";
    }
  }
  return "";
}

struct CudaGraphRunner::Recording {
  py::object graph; // torch.cuda.CUDAGraph
  /// What the recording reads, by input: the caller's parameter itself, or
  /// the recording's own buffer that each call's input is copied into.
  std::vector<py::object> inputs;
  std::vector<bool> inPlace;
  std::vector<char *> addresses; // of the in-place inputs
  py::object outputs;            // the recording's results
  void *stream = nullptr;        // recorded for this stream only
};

CudaGraphRunner::CudaGraphRunner(std::unique_ptr<GraphRunner> inner,
                                 std::string name, int device)
    : inner_(std::move(inner)), name_(std::move(name)), device_(device) {}

CudaGraphRunner::~CudaGraphRunner() = default;

void CudaGraphRunner::disable(const std::string &reason) const {
  disabled_ = reason;
  recording_.reset();
  if (logEnabled("breaks"))
    logArtifact("breaks", name_ + " is not replayed as a CUDA graph: " +
                              reason + "; its kernels launch one by one");
}

py::object CudaGraphRunner::run(PyObject *const *inputs, size_t count) const {
  if (!disabled_.empty() || busy_)
    return inner_->run(inputs, count);
  busy_ = true;
  struct Release {
    bool &flag;
    ~Release() { flag = false; }
  } release{busy_};
  if (recording_) {
    // Another stream's work could race the recording's buffers.
    if (currentCudaStream(device_) != recording_->stream)
      return inner_->run(inputs, count);
    return replay(inputs, count);
  }
  if (calls_++ == 0) // a warm-up: torch's and the driver's lazy set-up
    return inner_->run(inputs, count);
  return record(inputs, count);
}

py::object CudaGraphRunner::record(PyObject *const *inputs,
                                   size_t count) const {
  if (++recordings_ > kMaxRecordings) {
    disable("its parameters moved " + std::to_string(kMaxRecordings) +
            " times");
    return inner_->run(inputs, count);
  }
  const TorchHandles &torch = TorchHandles::get();
  py::object parameterType = torch.torch.attr("nn").attr("Parameter");
  auto recording = std::make_unique<Recording>();
  std::vector<PyObject *> reads(count);
  for (size_t i = 0; i < count; ++i) {
    py::handle input(inputs[i]);
    if (!isTensor(input)) {
      disable("input " + std::to_string(i) + " is not a tensor");
      return inner_->run(inputs, count);
    }
    bool inPlace = PyObject_IsInstance(input.ptr(), parameterType.ptr()) == 1;
    py::object read = py::reinterpret_borrow<py::object>(input);
    if (!inPlace) {
      // empty_like keeps the strides of a dense tensor; an expanded or
      // overlapping one would be copied into another layout.
      read = torch.torch.attr("empty_like")(input);
      if (!read.attr("stride")().equal(input.attr("stride")())) {
        disable("input " + std::to_string(i) +
                " overlaps itself or has gaps (an expanded tensor)");
        return inner_->run(inputs, count);
      }
      read.attr("copy_")(input);
    }
    recording->inputs.push_back(read);
    recording->inPlace.push_back(inPlace);
    recording->addresses.push_back(inPlace ? dataPointer(input.ptr())
                                           : nullptr);
    reads[i] = read.ptr();
  }

  py::object cuda = torch.torch.attr("cuda");
  recording->graph = cuda.attr("CUDAGraph")();
  py::object context = cuda.attr("graph")(recording->graph);
  try {
    context.attr("__enter__")();
    // torch.cuda.graph records on a side stream it makes current.
    try {
      recording->outputs = inner_->run(reads.data(), count);
    } catch (py::error_already_set &error) {
      context.attr("__exit__")(error.type(), error.value(), error.trace());
      throw;
    }
    context.attr("__exit__")(py::none(), py::none(), py::none());
  } catch (py::error_already_set &error) {
    // An op that waits for the GPU or reads a value on the host cannot be
    // recorded: every call runs plain.
    disable(std::string("recording failed: ") + error.what());
    return inner_->run(inputs, count);
  }
  recording->stream = currentCudaStream(device_);
  recording_ = std::move(recording);
  // Recording ran nothing: this call's results come from a first replay.
  return replay(inputs, count);
}

py::object CudaGraphRunner::replay(PyObject *const *inputs,
                                   size_t count) const {
  static PyObject *copyName = PyUnicode_InternFromString("copy_");
  static PyObject *replayName = PyUnicode_InternFromString("replay");
  Recording &recording = *recording_;
  for (size_t i = 0; i < count; ++i) {
    if (recording.inPlace[i]) {
      if (dataPointer(inputs[i]) != recording.addresses[i]) {
        recording_.reset(); // a parameter moved: record again
        return record(inputs, count);
      }
      continue;
    }
    if (recording.inputs[i].ptr() == inputs[i])
      continue;
    PyObject *done = PyObject_CallMethodOneArg(recording.inputs[i].ptr(),
                                               copyName, inputs[i]);
    if (!done)
      throw py::error_already_set();
    Py_DECREF(done);
  }
  PyObject *done = PyObject_CallMethodNoArgs(recording.graph.ptr(), replayName);
  if (!done)
    throw py::error_already_set();
  Py_DECREF(done);
  return copyOut(recording.outputs);
}

std::string CudaGraphRunner::describe() const {
  std::string state = !disabled_.empty() ? "not replayed: " + disabled_
                      : recording_       ? "replayed as a CUDA graph"
                                         : "to be recorded as a CUDA graph";
  return inner_->describe() + " (" + state + ")";
}

} // namespace kiln::python
