// Lowering: walks the graph in order, lowering each op through the table of
// lowerings into virtual tensors, realizing them into buffers where needed,
// and leaving everything else to torch as extern steps.
// Depends on ir/ and passes/lowerings/Lowerer.h.
#include "passes/Lowering.h"

#include "ir/Error.h"
#include "ir/ops/MetaUtils.h"
#include "passes/lowerings/Lowerer.h"

#include <algorithm>
#include <unordered_set>

namespace kiln {

using loop::BufferKind;

loop::Program lowerGraph(std::shared_ptr<const Graph> graph,
                         const Device &device, bool standalone) {
  return lowering::Lowerer(std::move(graph), device, standalone).run();
}

namespace lowering {

const LoweringTable &loweringTable() {
  static const LoweringTable table = [] {
    LoweringTable built;
    registerPointwiseLowerings(built);
    registerReductionLowerings(built);
    registerViewLowerings(built);
    registerNormalizationLowerings(built);
    registerTensorLowerings(built);
    registerLinearAlgebraLowerings(built);
    registerConvolutionLowerings(built);
    registerIndexingLowerings(built);
    return built;
  }();
  return table;
}

namespace {

// The lowerings that handle sizes that vary between calls (size
// expressions in their shapes, strides and counts). Every other op of a
// graph with size symbols whose tensors or arguments mention a symbol is
// left to torch, which takes any size.
const std::unordered_set<std::string> &symbolicLowerings() {
  static const std::unordered_set<std::string> names = [] {
    std::unordered_set<std::string> built;
    LoweringTable families;
    registerPointwiseLowerings(families);
    registerReductionLowerings(families);
    registerViewLowerings(families);
    for (const auto &[name, lowering] : families)
      built.insert(name);
    for (const char *name : {"aten::_softmax",
                             "aten::_safe_softmax",
                             "aten::softmax.int",
                             "aten::_log_softmax",
                             "aten::log_softmax.int",
                             "aten::native_layer_norm",
                             "aten::layer_norm",
                             "aten::_native_batch_norm_legit_no_training",
                             "aten::native_batch_norm",
                             "aten::full",
                             "aten::zeros",
                             "aten::ones",
                             "aten::empty.memory_format",
                             "aten::empty_strided",
                             "aten::scalar_tensor",
                             "aten::full_like",
                             "aten::zeros_like",
                             "aten::ones_like",
                             "aten::empty_like",
                             "aten::new_zeros",
                             "aten::new_ones",
                             "aten::new_empty",
                             "aten::new_full",
                             "aten::fill.Scalar",
                             "aten::fill.Tensor",
                             "aten::arange",
                             "aten::arange.start",
                             "aten::arange.start_step",
                             "aten::cat",
                             "aten::stack",
                             "aten::tril",
                             "aten::triu"})
      built.insert(name);
    return built;
  }();
  return names;
}

// Whether a node's tensors or arguments mention a size symbol.
bool mentionsSymbols(const Node &node) {
  for (const Value *value : node.operands())
    if (value && value->meta().isSymbolic())
      return true;
  for (const auto &result : node.results())
    if (result->meta().isSymbolic())
      return true;
  for (const Argument &argument : node.arguments())
    if (argument.isSymbolic())
      return true;
  return false;
}

// Each value a node reads, once.
std::vector<const Value *> distinctOperands(const Node &node) {
  std::vector<const Value *> values;
  std::unordered_set<const Value *> seen;
  for (const Value *value : node.operands())
    if (value && seen.insert(value).second)
      values.push_back(value);
  return values;
}

std::string shortOpName(const Node &node) {
  if (!node.schema())
    return "value";
  std::string name = node.schema()->name;
  if (auto colons = name.rfind("::"); colons != std::string::npos)
    name = name.substr(colons + 2);
  while (!name.empty() && name.front() == '_')
    name.erase(name.begin());
  return name;
}

bool onDevice(const TensorMeta &meta, const Device &device) {
  bool sameIndex = meta.device.index == device.index || meta.device.index < 0 ||
                   device.index < 0;
  return meta.device.type == device.type && sameIndex;
}

// Whether a node reads or makes a tensor on another device than the
// program's (a CPU computation inside a CUDA graph, a copy between
// devices): torch runs those nodes, the program's kernels the rest.
bool touchesOtherDevice(const Node &node, const Device &device) {
  for (const Value *value : node.operands())
    if (value && !onDevice(value->meta(), device))
      return true;
  for (const auto &result : node.results())
    if (!onDevice(result->meta(), device))
      return true;
  return false;
}

// torch accepts dim 0 (or -1) of a 0-d tensor, where lowerings index a
// dimension that does not exist: torch runs the nodes that are given a dim
// of a 0-d tensor (flip, cumsum, softmax, sum(0) of a 0-d tensor).
bool takesDimOfScalar(const Node &node) {
  bool scalarOperand = false;
  for (const Value *value : node.operands())
    scalarOperand |= value && value->meta().dim() == 0;
  if (!scalarOperand)
    return false;
  const auto &arguments = node.schema()->arguments;
  for (size_t i = 0; i < arguments.size() && i < node.arguments().size(); ++i)
    if ((arguments[i].name == "dim" || arguments[i].name == "dims") &&
        !node.arguments()[i].isNone())
      return true;
  return false;
}

bool hasComplex(const Node &node) {
  for (const Value *value : node.operands())
    if (value && isComplex(value->meta().dtype))
      return true;
  for (const auto &result : node.results())
    if (isComplex(result->meta().dtype))
      return true;
  return false;
}

} // namespace

Lowerer::Lowerer(std::shared_ptr<const Graph> graph, Device device,
                 bool standalone)
    : graph_(std::move(graph)), device_(device), standalone_(standalone) {
  program_.graph = graph_;
  for (const SymbolBinding &binding : graph_->symbols())
    program_.symbolHints.push_back(binding.hint);
  for (const auto &node : graph_->nodes())
    for (const Value *value : distinctOperands(*node)) {
      ++users_[value];
      ++remainingUses_[value];
    }
  for (const Argument &output : graph_->outputs()) {
    if (!output.isTensor())
      continue;
    isOutput_[output.toTensor()] = true;
    ++users_[output.toTensor()];
    ++remainingUses_[output.toTensor()];
  }
}

loop::Program Lowerer::run() {
  for (const auto &node : graph_->nodes()) {
    node_ = node.get();
    lowerNode(*node);
    for (const Value *value : distinctOperands(*node))
      --remainingUses_[value];
  }
  for (const Argument &output : graph_->outputs()) {
    loop::ProgramOutput result;
    if (output.isTensor())
      result.buffer = outputBuffer(output.toTensor());
    else
      result.constant = output;
    program_.outputs.push_back(std::move(result));
  }
  // Every value that has a buffer of its own layout gets it in bufferOf.
  for (const auto &node : graph_->nodes())
    for (const auto &result : node->results()) {
      auto found = tensors_.find(result.get());
      if (found == tensors_.end() || !found->second.realized() ||
          program_.bufferOf.count(result.get()))
        continue;
      const Placement &placement = *found->second.placement;
      const TensorMeta &meta = program_.buffers[placement.buffer].meta;
      if (placement.offset->constant() == 0 &&
          placement.strides == symbolicStrides(meta) &&
          found->second.symSizes == symbolicSizes(meta))
        program_.bufferOf[result.get()] = placement.buffer;
    }
  return std::move(program_);
}

void Lowerer::lowerNode(const Node &node) {
  if (node.kind() == Node::Kind::Input) {
    const Value *value = node.result();
    loop::Buffer buffer;
    buffer.name = value->name();
    buffer.kind = BufferKind::Input;
    buffer.meta = value->meta();
    const auto &inputs = graph_->inputs();
    buffer.graphInput =
        std::find(inputs.begin(), inputs.end(), value) - inputs.begin();
    int64_t index = program_.addBuffer(std::move(buffer));
    tensors_[value] =
        placed({index, symbolicStrides(value->meta()), size::constant(0)},
               value->meta().dtype, symbolicSizes(value->meta()));
    program_.bufferOf[value] = index;
    return;
  }
  if (node.kind() == Node::Kind::Constant) {
    const Value *value = node.result();
    loop::Buffer buffer;
    buffer.name = value->name();
    buffer.kind = BufferKind::Constant;
    buffer.meta = node.constant()->meta;
    buffer.constant = node.constant();
    int64_t index = program_.addBuffer(std::move(buffer));
    tensors_[value] =
        placed({index, constantShape(node.constant()->meta.strides),
                size::constant(0)},
               value->meta().dtype, value->meta().sizes);
    program_.bufferOf[value] = index;
    return;
  }
  if (node.writesArguments() || hasComplex(node) ||
      touchesOtherDevice(node, device_)) {
    lowerExtern(node);
    return;
  }
  const LoweringTable &table = loweringTable();
  const std::string &name = node.schema()->qualifiedName();
  auto found = table.find(name);
  if (found == table.end() || takesDimOfScalar(node) ||
      (symbolic() && mentionsSymbols(node) &&
       !symbolicLowerings().count(name))) {
    lowerExtern(node);
    return;
  }
  LoweringResult results;
  if (node.isOp()) {
    results = found->second(*this, node);
  } else {
    // An extern of a lowered op: the frontend keeps e.g. `x * 2` (a number
    // where the schema says Tensor) as an extern with torch's metadata. Its
    // arguments sit where the op's lowering reads them; where they do not
    // fit, torch runs it.
    try {
      results = found->second(*this, node);
    } catch (const Error &) {
      results.reset();
    }
  }
  // A lowering must give what the node says it returns. An extern node's
  // metadata is torch's (the frontend recorded it): where the lowering
  // disagrees, torch runs it; for an op node it is a bug in kiln.
  auto agrees = [&] {
    if (results->size() != node.results().size())
      return false;
    for (size_t i = 0; i < results->size(); ++i) {
      const TensorMeta &meta = node.result(static_cast<unsigned>(i))->meta();
      LoweredTensor &tensor = (*results)[i];
      if (tensor.sizes != meta.sizes || tensor.dtype != meta.dtype)
        return false;
      // Where sizes vary, the lowering's expressions and the graph's may
      // differ where the capture's guards make them equal (a symbol torch
      // specialised to a number, two symbols it unified): the graph's are
      // the ones later nodes are written in.
      tensor.symSizes = symbolicSizes(meta);
    }
    return true;
  };
  if (results && !agrees()) {
    if (node.isOp())
      throw Error("lowering of " + node.schema()->qualifiedName() +
                  " gave results other than its meta function's");
    results.reset();
  }
  if (!results) {
    lowerExtern(node);
    return;
  }
  for (size_t i = 0; i < results->size(); ++i)
    tensors_[node.result(static_cast<unsigned>(i))] = (*results)[i];
  afterNode(node);
}

const Expr *Lowerer::element(const LoweredTensor &tensor) {
  Index index;
  for (int64_t d = 0; d < tensor.dim(); ++d)
    index.push_back(exprs().var(d));
  return tensor.loader(index);
}

bool Lowerer::tooLongToInline(const LoweredTensor &tensor) {
  std::unordered_set<const Expr *> seen;
  return loop::operationCount(element(tensor), seen) >
         loop::kMaxKernelOperations;
}

// A temporary computed element by element from a channels-last tensor of
// its shape (a convolution's result, through batch norm, ReLU and a
// residual add) is laid out channels-last too: the kernel that writes it
// reads and writes in one order, and the next convolution reads it as it
// is. Otherwise the node's layout.
bool Lowerer::readsOwnPosition(const Expr *load) {
  const TensorMeta &buffer = program_.buffers[load->id()].meta;
  std::vector<const Expr *> zeros(buffer.dim(), exprs().integer(0));
  if (!exprs().substituteVars(load->index(), zeros)->isIntegerConstant(0))
    return false;
  for (int64_t d = 0; d < buffer.dim(); ++d)
    if (buffer.sizes[d] > 1 && loop::affineCoefficient(load->index(), d) !=
                                   std::optional<int64_t>(buffer.strides[d]))
      return false;
  return true;
}

MemoryFormat Lowerer::sourceFormat(const LoweredTensor &tensor) {
  int64_t dims = tensor.dim();
  if ((dims != 4 && dims != 5) || tensor.isSymbolic())
    return MemoryFormat::Contiguous;
  for (const Expr *load : loop::loadsOf(element(tensor))) {
    const TensorMeta &source = program_.buffers[load->id()].meta;
    MemoryFormat format = meta::suggestMemoryFormat(source);
    if (source.sizes == tensor.sizes && format != MemoryFormat::Contiguous &&
        readsOwnPosition(load))
      return format;
  }
  return MemoryFormat::Contiguous;
}

TensorMeta Lowerer::temporaryLayout(const LoweredTensor &tensor,
                                    const TensorMeta &meta) {
  if (tensor.isSymbolic() || !meta.isContiguous())
    return meta;
  MemoryFormat format = sourceFormat(tensor);
  if (format == MemoryFormat::Contiguous)
    return meta;
  return TensorMeta(meta.dtype, meta.sizes,
                    meta::stridesForFormat(meta.sizes, format), 0, meta.device);
}

LoweredTensor Lowerer::readable(const LoweredTensor &tensor,
                                const std::string &what) {
  if (tensor.realized() || tensor.cheap)
    return tensor;
  return realize(
      tensor,
      temporaryLayout(tensor, contiguousMeta(tensor.dtype, tensor.sizes)),
      BufferKind::Temporary, what);
}

LoweredTensor Lowerer::readableByWindows(const LoweredTensor &tensor,
                                         const std::string &what) {
  // Operations (loads and their indices counted) of an element computed
  // again at each read: a channels-last batch norm and ReLU take 15.
  constexpr int64_t kMaxRepeatedOperations = 24;
  if (tensor.realized() || tensor.cheap)
    return tensor;
  const Expr *value = element(tensor);
  std::unordered_set<const Expr *> seen;
  if (loop::isCheapArithmetic(value) &&
      loop::operationCount(value, seen) <= kMaxRepeatedOperations)
    return tensor;
  return readable(tensor, what);
}

LoweredTensor Lowerer::operandCopy(const Value *value,
                                   const LoweredTensor &tensor,
                                   const TensorMeta &layout,
                                   const std::string &what) {
  auto key = std::make_pair(value, layout.strides);
  auto known = operandCopies_.find(key);
  if (known == operandCopies_.end())
    known = operandCopies_
                .emplace(key, realize(tensor, layout, BufferKind::Tensor, what))
                .first;
  return known->second;
}

void Lowerer::afterNode(const Node &node) {
  for (const auto &result : node.results()) {
    LoweredTensor &tensor = tensors_.at(result.get());
    if (tensor.realized())
      continue;
    if (isOutput_.count(result.get()))
      tensor = realize(tensor, result->meta(), BufferKind::Tensor,
                       shortOpName(node));
    else if (!tensor.cheap &&
             (users_[result.get()] >= 2 || tooLongToInline(tensor))) {
      TensorMeta layout = temporaryLayout(tensor, result->meta());
      tensor =
          realize(tensor, layout, BufferKind::Temporary, shortOpName(node));
      // A realized graph value is laid out as its meta says (view ops place
      // their results by it): in another layout it is loads of its buffer.
      if (layout.strides != result->meta().strides)
        tensor.placement.reset();
    }
  }
}

void Lowerer::realizeBeforeMutation() {
  const Node &current = *node_;
  std::vector<const Value *> operands = distinctOperands(current);
  for (const auto &node : graph_->nodes()) {
    if (node.get() == &current)
      break;
    for (const auto &result : node->results()) {
      auto found = tensors_.find(result.get());
      if (found == tensors_.end() || found->second.realized())
        continue;
      int uses = remainingUses_[result.get()];
      if (std::find(operands.begin(), operands.end(), result.get()) !=
          operands.end())
        --uses;
      if (uses > 0)
        found->second = realize(found->second, result->meta(),
                                BufferKind::Temporary, shortOpName(*node));
    }
  }
}

void Lowerer::lowerExtern(const Node &node) {
  if (node.writesArguments())
    realizeBeforeMutation();
  for (const Value *value : distinctOperands(node))
    bufferOfValue(value, /*mustBeTensor=*/true);
  loop::Step step;
  step.kind = loop::Step::Kind::Extern;
  step.node = &node;
  for (const auto &result : node.results()) {
    int64_t buffer =
        addBuffer(result->meta(), BufferKind::Tensor, result->name());
    program_.buffers[buffer].name = result->name();
    tensors_[result.get()] =
        placed({buffer, symbolicStrides(result->meta()), size::constant(0)},
               result->meta().dtype, symbolicSizes(result->meta()));
    program_.bufferOf[result.get()] = buffer;
    step.results.push_back(buffer);
  }
  program_.steps.push_back(std::move(step));
}

std::vector<LoweredTensor> Lowerer::externCall(
    const Node &node,
    const std::vector<std::pair<const Value *, LoweredTensor>> &operands,
    const std::vector<TensorMeta> &resultMetas) {
  if (node.writesArguments() || resultMetas.size() != node.results().size())
    throw Error("extern call of " + node.schema()->qualifiedName() +
                ": an op that writes its arguments, or results other than "
                "its node's");
  loop::Step step;
  step.kind = loop::Step::Kind::Extern;
  step.node = &node;
  for (const auto &[value, tensor] : operands) {
    // Torch sees the buffer as its meta says: the tensor must be all of it.
    const loop::Buffer *buffer =
        tensor.realized() ? &program_.buffers[tensor.placement->buffer]
                          : nullptr;
    if (!buffer ||
        (buffer->kind != BufferKind::Tensor &&
         buffer->kind != BufferKind::Temporary &&
         buffer->kind != BufferKind::Input &&
         buffer->kind != BufferKind::Constant) ||
        tensor.placement->offset->constant() != 0 ||
        tensor.placement->strides != symbolicStrides(buffer->meta) ||
        tensor.symSizes != symbolicSizes(buffer->meta))
      throw Error("extern call of " + node.schema()->qualifiedName() +
                  ": an operand is not a whole tensor buffer");
    // Torch reads it: a tensor, not workspace memory.
    if (buffer->kind == BufferKind::Temporary)
      program_.buffers[tensor.placement->buffer].kind = BufferKind::Tensor;
    step.operandBuffers.push_back({value, tensor.placement->buffer});
  }
  for (const Value *value : distinctOperands(node))
    if (std::none_of(
            operands.begin(), operands.end(),
            [&](const auto &operand) { return operand.first == value; }))
      bufferOfValue(value, /*mustBeTensor=*/true);
  std::vector<LoweredTensor> results;
  for (size_t i = 0; i < resultMetas.size(); ++i) {
    const TensorMeta &meta = resultMetas[i];
    int64_t buffer = addBuffer(meta, BufferKind::Tensor,
                               node.result(static_cast<unsigned>(i))->name());
    step.results.push_back(buffer);
    LoweredTensor result =
        placed({buffer, symbolicStrides(meta), size::constant(0)}, meta.dtype,
               symbolicSizes(meta));
    result.placement.reset();
    results.push_back(std::move(result));
  }
  program_.steps.push_back(std::move(step));
  return results;
}

int64_t Lowerer::bufferOfValue(const Value *value, bool mustBeTensor) {
  int64_t buffer;
  if (auto known = program_.bufferOf.find(value);
      known != program_.bufferOf.end()) {
    buffer = known->second;
  } else {
    LoweredTensor &tensor = tensors_.at(value);
    if (!tensor.realized())
      tensor = realize(
          tensor, value->meta(),
          mustBeTensor ? BufferKind::Tensor : BufferKind::Temporary,
          value->producer() ? shortOpName(*value->producer()) : "value");
    const Placement &placement = *tensor.placement;
    const TensorMeta &meta = program_.buffers[placement.buffer].meta;
    if (placement.offset->constant() == 0 &&
        placement.strides == symbolicStrides(meta) &&
        tensor.symSizes == symbolicSizes(meta)) {
      buffer = placement.buffer;
    } else {
      loop::Buffer view;
      view.name = value->name();
      view.kind = BufferKind::View;
      view.base = placement.buffer;
      view.meta = TensorMeta(tensor.dtype, tensor.sizes,
                             hints(placement.strides), hint(placement.offset));
      if (tensor.isSymbolic() || !loop::Ranges(placement.strides).isStatic() ||
          !placement.offset->isConstant()) {
        auto layout = std::make_shared<SymbolicLayout>();
        layout->sizes = tensor.symSizes;
        layout->strides = placement.strides;
        layout->storageOffset = placement.offset;
        view.meta.symbolic = std::move(layout);
      }
      buffer = program_.addBuffer(std::move(view));
    }
    program_.bufferOf[value] = buffer;
  }
  if (mustBeTensor) {
    loop::Buffer &target = program_.buffers[buffer];
    loop::Buffer &root = target.kind == BufferKind::View
                             ? program_.buffers[target.base]
                             : target;
    if (root.kind == BufferKind::Temporary)
      root.kind = BufferKind::Tensor;
  }
  return buffer;
}

// A graph output is a tensor object of its own, as eager's is: where its
// buffer is the buffer of another value (an input it views with the same
// layout, `x[:]`, `x.detach()`, or another output), the output is a fresh
// view of that buffer, never the other value's tensor itself.
int64_t Lowerer::outputBuffer(const Value *value) {
  int64_t buffer = bufferOfValue(value, /*mustBeTensor=*/true);
  const loop::Buffer &found = program_.buffers[buffer];
  // A graph input owns its buffer: returned, it is the caller's tensor.
  bool ownInput = found.kind == BufferKind::Input &&
                  graph_->inputs().at(found.graphInput) == value;
  if (found.kind == BufferKind::View || ownInput)
    return buffer;
  for (const auto &[other, otherBuffer] : program_.bufferOf)
    if (other != value && otherBuffer == buffer) {
      loop::Buffer view;
      view.name = value->name();
      view.kind = BufferKind::View;
      view.base = buffer;
      view.meta = program_.buffers[buffer].meta;
      view.meta.storageOffset = 0;
      int64_t viewBuffer = program_.addBuffer(std::move(view));
      program_.bufferOf[value] =
          viewBuffer; // the same object if returned twice
      return viewBuffer;
    }
  return buffer;
}

LoweredTensor Lowerer::input(const Node &node, size_t argument) {
  const Argument &arg = node.arguments().at(argument);
  if (arg.isTensor())
    return lowered(arg.toTensor());
  if (arg.isSymbolic() && arg.kind() == Argument::Kind::Int) {
    // A number computed from sizes (`x * x.shape[1]`): read in the call.
    LoweredTensor tensor = full(0, DType::Int64, Shape{});
    const Expr *value = size(arg.symbolicInts().at(0));
    tensor.loader = [value](const Index &) { return value; };
    return tensor;
  }
  DType dtype = arg.kind() == Argument::Kind::Bool  ? DType::Bool
                : arg.kind() == Argument::Kind::Int ? DType::Int64
                                                    : DType::Float64;
  return full(arg.toDouble(), dtype, Shape{});
}

LoweredTensor Lowerer::lowered(const Value *value) const {
  return tensors_.at(value);
}

LoweredTensor Lowerer::full(double value, DType dtype, Shape sizes) {
  return full(value, dtype, constantShape(sizes));
}

LoweredTensor Lowerer::full(double value, DType dtype, SymShape sizes) {
  LoweredTensor tensor;
  tensor.dtype = dtype;
  tensor.sizes = hints(sizes);
  tensor.symSizes = std::move(sizes);
  const Expr *element = constant(value, dtype);
  tensor.loader = [element](const Index &) { return element; };
  tensor.cheap = true;
  return tensor;
}

LoweredTensor Lowerer::placed(const Placement &placement, DType dtype,
                              Shape sizes) {
  return placed(placement, dtype, constantShape(sizes));
}

LoweredTensor Lowerer::placed(const Placement &placement, DType dtype,
                              SymShape sizes) {
  LoweredTensor tensor;
  tensor.dtype = dtype;
  tensor.sizes = hints(sizes);
  tensor.symSizes = std::move(sizes);
  tensor.placement = placement;
  tensor.cheap = true;
  loop::ExprContext *context = &exprs();
  const Expr *start = context->size(placement.offset);
  std::vector<const Expr *> strides;
  for (SymSize stride : placement.strides)
    strides.push_back(context->size(stride));
  tensor.loader = [context, buffer = placement.buffer, start, strides,
                   dtype](const Index &index) {
    const Expr *offset = start;
    for (size_t d = 0; d < index.size(); ++d)
      offset = context->add(offset, context->mul(index[d], strides[d]));
    return context->load(buffer, dtype, offset);
  };
  return tensor;
}

LoweredTensor Lowerer::pointwise(Shape sizes, DType computation, DType result,
                                 const std::vector<LoweredTensor> &inputs,
                                 const PointwiseBody &body) {
  return pointwise(constantShape(sizes),
                   std::vector<DType>(inputs.size(), computation), result,
                   inputs, body);
}

LoweredTensor Lowerer::pointwise(SymShape sizes, DType computation,
                                 DType result,
                                 const std::vector<LoweredTensor> &inputs,
                                 const PointwiseBody &body) {
  return pointwise(std::move(sizes),
                   std::vector<DType>(inputs.size(), computation), result,
                   inputs, body);
}

LoweredTensor Lowerer::pointwise(Shape sizes,
                                 const std::vector<DType> &computations,
                                 DType result,
                                 const std::vector<LoweredTensor> &inputs,
                                 const PointwiseBody &body) {
  return pointwise(constantShape(sizes), computations, result, inputs, body);
}

LoweredTensor Lowerer::pointwise(SymShape symSizes,
                                 const std::vector<DType> &computations,
                                 DType result,
                                 const std::vector<LoweredTensor> &inputs,
                                 const PointwiseBody &body) {
  // Inputs broadcast to `sizes` (a lowering given metadata that does not
  // fit its inputs, as torch's for an op whose result was resized in place,
  // must fail here rather than index past them). Where sizes vary, two
  // symbols that broadcast against each other are equal in every call: the
  // capture's guards say so (torch's meta functions required it).
  Shape sizes = hints(symSizes);
  for (const LoweredTensor &input : inputs)
    if (meta::broadcastShapes(input.sizes, sizes) != sizes)
      throw Error("lowering: an input of " + shapeToString(input.sizes) +
                  " does not broadcast to " + shapeToString(sizes));
  LoweredTensor tensor;
  tensor.dtype = result;
  tensor.sizes = sizes;
  tensor.symSizes = std::move(symSizes);
  loop::ExprContext *context = &exprs();
  tensor.loader = [context, inputs, computations, result,
                   body](const Index &index) {
    std::vector<const Expr *> values;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const LoweredTensor &input = inputs[i];
      // Broadcasting: align trailing dims; size-1 dims read index 0.
      size_t skip = index.size() - input.sizes.size();
      Index inner;
      for (size_t d = 0; d < input.sizes.size(); ++d)
        inner.push_back(input.sizes[d] == 1 ? context->integer(0)
                                            : index[skip + d]);
      values.push_back(context->cast(input.loader(inner), computations[i]));
    }
    return context->cast(body(values), result);
  };
  return tensor;
}

LoweredTensor Lowerer::remap(const LoweredTensor &source, Shape sizes,
                             std::function<Index(const Index &)> map) {
  return remap(source, constantShape(sizes), std::move(map));
}

LoweredTensor Lowerer::remap(const LoweredTensor &source, SymShape sizes,
                             std::function<Index(const Index &)> map) {
  LoweredTensor tensor;
  tensor.dtype = source.dtype;
  tensor.sizes = hints(sizes);
  tensor.symSizes = std::move(sizes);
  tensor.cheap = source.cheap;
  Loader inner = source.loader;
  tensor.loader = [inner, map](const Index &index) {
    return inner(map(index));
  };
  return tensor;
}

int64_t Lowerer::addBuffer(const TensorMeta &meta, BufferKind kind,
                           const std::string &what) {
  loop::Buffer buffer;
  buffer.kind = kind;
  buffer.meta = meta;
  buffer.meta.storageOffset = 0;
  buffer.name = what + std::to_string(program_.buffers.size());
  return program_.addBuffer(std::move(buffer));
}

int64_t Lowerer::hint(SymSize value) const { return program_.hint(value); }

Shape Lowerer::hints(const SymShape &values) const {
  return program_.hints(values);
}

TensorMeta Lowerer::contiguous(DType dtype, const SymShape &sizes) const {
  TensorMeta meta(dtype, hints(sizes));
  if (!loop::Ranges(sizes).isStatic()) {
    auto layout = std::make_shared<SymbolicLayout>();
    layout->sizes = sizes;
    layout->strides = rowMajorStrides(sizes);
    meta.symbolic = std::move(layout);
  }
  return meta;
}

const Expr *Lowerer::count(SymSize value, DType dtype) {
  if (auto constant = value->constant())
    return this->constant(static_cast<double>(*constant), dtype);
  return cast(size(value), dtype);
}

std::string Lowerer::origin() const {
  if (!node_ || !node_->schema())
    return "";
  std::string text = node_->schema()->qualifiedName();
  if (!node_->origin().empty())
    text += " (from " + node_->origin() + ")";
  return text;
}

void Lowerer::addKernel(loop::Kernel kernel, const std::string &what) {
  kernel.name = "kernel_" + what + "_" + std::to_string(kernelCount_++);
  kernel.origin = origin();
  loop::Step step;
  step.kind = loop::Step::Kind::Kernel;
  step.kernel = std::move(kernel);
  program_.steps.push_back(std::move(step));
}

LoweredTensor Lowerer::realize(const LoweredTensor &tensor,
                               const TensorMeta &meta, BufferKind kind,
                               const std::string &what) {
  int64_t buffer = addBuffer(meta, kind, what);
  loop::Kernel kernel;
  kernel.outerRanges = symbolicSizes(meta);
  SymShape strides = symbolicStrides(meta);
  Index index;
  const Expr *offset = exprs().integer(0);
  for (int64_t d = 0; d < meta.dim(); ++d) {
    index.push_back(exprs().var(d));
    offset = exprs().add(offset, exprs().mul(index.back(), size(strides[d])));
  }
  loop::Loop body;
  body.stores.push_back(
      {buffer, offset, cast(tensor.loader(index), meta.dtype)});
  kernel.loops.push_back(std::move(body));
  addKernel(std::move(kernel), what);
  return placed({buffer, strides, size::constant(0)}, meta.dtype,
                symbolicSizes(meta));
}

// --- Reduction kernels ---

ReductionKernel::ReductionKernel(Lowerer &lowerer, const Shape &inputSizes,
                                 std::vector<int64_t> dims)
    : ReductionKernel(lowerer, constantShape(inputSizes), std::move(dims)) {}

ReductionKernel::ReductionKernel(Lowerer &lowerer, const SymShape &inputSizes,
                                 std::vector<int64_t> dims)
    : lowerer_(lowerer), inputSizes_(inputSizes), dims_(std::move(dims)),
      reduced_(inputSizes.size(), false) {
  for (int64_t dim : dims_)
    reduced_[dim] = true;
  loop::ExprContext &exprs = lowerer.exprs();
  int64_t kept = 0;
  for (size_t d = 0; d < inputSizes.size(); ++d)
    if (!reduced_[d])
      kernel_.outerRanges.push_back(inputSizes[d]), ++kept;
  loop::Loop pass;
  int64_t reducedVar = kept, keptVar = 0;
  for (size_t d = 0; d < inputSizes.size(); ++d) {
    if (reduced_[d]) {
      pass.ranges.push_back(inputSizes[d]);
      reducedNumel_ = size::mul(reducedNumel_, inputSizes[d]);
      index_.push_back(exprs.var(reducedVar++));
    } else {
      index_.push_back(exprs.var(keptVar++));
    }
  }
  kernel_.loops.push_back(std::move(pass));
}

const Expr *ReductionKernel::reduce(ReduceOp op, const Expr *value) {
  loop::Reduction reduction{op, value};
  kernel_.loops.back().reductions.push_back(reduction);
  return lowerer_.exprs().reductionValue(reductions_++, reduction.dtype());
}

void ReductionKernel::newPass() {
  loop::Loop pass;
  pass.ranges = kernel_.loops.back().ranges;
  kernel_.loops.push_back(std::move(pass));
}

LoweredTensor ReductionKernel::store(const Expr *value,
                                     const TensorMeta &meta) {
  int64_t buffer =
      lowerer_.addBuffer(meta, loop::BufferKind::Temporary, "reduction");
  loop::ExprContext &exprs = lowerer_.exprs();
  const Expr *offset = exprs.integer(0);
  bool keepdim = meta.dim() == static_cast<int64_t>(inputSizes_.size());
  SymShape strides = symbolicStrides(meta);
  int64_t keptVar = 0;
  for (int64_t d = 0; d < meta.dim(); ++d) {
    if (keepdim && reduced_[d])
      continue;
    offset = exprs.add(
        offset, exprs.mul(exprs.var(keptVar++), lowerer_.size(strides[d])));
  }
  final_.stores.push_back({buffer, offset, exprs.cast(value, meta.dtype)});
  return lowerer_.placed({buffer, strides, size::constant(0)}, meta.dtype,
                         symbolicSizes(meta));
}

void ReductionKernel::emit(const std::string &what) {
  kernel_.loops.push_back(std::move(final_));
  lowerer_.addKernel(std::move(kernel_), what);
}

// --- Shared helpers ---

double doubleArgument(const Node &node, size_t index, double otherwise) {
  if (index >= node.arguments().size() || node.arguments()[index].isNone())
    return otherwise;
  return node.arguments()[index].toDouble();
}

int64_t wrapDim(int64_t dim, int64_t ndim) {
  int64_t wrapped = dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
  if (wrapped < 0 || wrapped >= std::max<int64_t>(ndim, 1))
    throw Error("lowering: dimension " + std::to_string(dim) + " out of range");
  return wrapped;
}

std::vector<int64_t> reductionDims(const Argument &dims, int64_t ndim) {
  std::vector<int64_t> result;
  if (!dims.isNone())
    for (int64_t dim : dims.toIntList())
      if (ndim > 0)
        result.push_back(wrapDim(dim, ndim));
  if (dims.isNone() || dims.toIntList().empty())
    for (int64_t d = 0; d < ndim; ++d)
      result.push_back(d);
  std::sort(result.begin(), result.end());
  return result;
}

bool isReducedFloat(DType dtype) {
  return dtype == DType::Float16 || dtype == DType::BFloat16;
}

DType accumulationType(DType dtype) {
  return isReducedFloat(dtype) ? DType::Float32 : dtype;
}

Deviations meanAndSquaredDeviations(Lowerer &lowerer, ReductionKernel &kernel,
                                    const Expr *element, DType dtype) {
  // Two passes: the mean, then the squared deviations from it. A row whose
  // elements are all equal has exactly that value as its mean (max == min),
  // as eager's Welford moments give: sum / n can be an ulp off, which
  // layer_norm's 1/sqrt(eps) scales to 1e-3 where eager gives 0. (Comparing
  // each element with the row's first would be cheaper, but that load of
  // another point keeps a norm from fusing with the kernel making its input.)
  const Expr *sum = kernel.reduce(ReduceOp::Sum, element);
  const Expr *largest = kernel.reduce(ReduceOp::Max, element);
  const Expr *smallest = kernel.reduce(ReduceOp::Min, element);
  const Expr *mean = lowerer.where(
      lowerer.binary(BinaryOp::Eq, largest, smallest), largest,
      lowerer.binary(BinaryOp::Div, sum,
                     lowerer.count(kernel.symbolicReducedNumel(), dtype)));
  kernel.newPass();
  const Expr *deviation = lowerer.binary(BinaryOp::Sub, element, mean);
  const Expr *squares = kernel.reduce(
      ReduceOp::Sum, lowerer.binary(BinaryOp::Mul, deviation, deviation));
  return {mean, squares};
}

LoweredTensor
reduceTensor(Lowerer &lowerer, const LoweredTensor &input,
             const std::vector<int64_t> &dims, ReduceOp op, DType accumulate,
             const TensorMeta &meta, const std::string &what,
             const std::function<const Expr *(const Expr *)> &epilogue) {
  ReductionKernel kernel(lowerer, input.symSizes, dims);
  const Expr *value = lowerer.cast(input.loader(kernel.index()), accumulate);
  const Expr *result = kernel.reduce(op, value);
  if (epilogue)
    result = epilogue(result);
  LoweredTensor stored = kernel.store(result, meta);
  kernel.emit(what);
  return stored;
}

Shape reducedShape(const Shape &sizes, const std::vector<int64_t> &dims,
                   bool keepdim) {
  return loop::Ranges(reducedShape(constantShape(sizes), dims, keepdim))
      .constants();
}

SymShape reducedShape(const SymShape &sizes, const std::vector<int64_t> &dims,
                      bool keepdim) {
  SymShape result;
  for (size_t d = 0; d < sizes.size(); ++d) {
    bool reduced = std::find(dims.begin(), dims.end(),
                             static_cast<int64_t>(d)) != dims.end();
    if (!reduced)
      result.push_back(sizes[d]);
    else if (keepdim)
      result.push_back(size::constant(1));
  }
  return result;
}

TensorMeta contiguousMeta(DType dtype, const Shape &sizes) {
  return TensorMeta(dtype, sizes);
}

SymShape rowMajorStrides(const SymShape &sizes) {
  SymShape strides(sizes.size(), size::constant(1));
  for (size_t d = sizes.size(); d-- > 1;)
    strides[d - 1] = size::mul(strides[d], sizes[d]);
  return strides;
}

SymShape constantShape(const Shape &values) {
  SymShape result;
  for (int64_t value : values)
    result.push_back(size::constant(value));
  return result;
}

SymShape symbolicSizes(const TensorMeta &meta) {
  SymShape result;
  for (int64_t d = 0; d < meta.dim(); ++d)
    result.push_back(meta.symSize(d));
  return result;
}

SymShape symbolicStrides(const TensorMeta &meta) {
  SymShape result;
  for (int64_t d = 0; d < meta.dim(); ++d)
    result.push_back(meta.symStride(d));
  return result;
}

SymSize symbolicOffset(const TensorMeta &meta) {
  if (meta.symbolic)
    return meta.symbolic->storageOffset;
  return size::constant(meta.storageOffset);
}

bool LoweredTensor::isSymbolic() const {
  for (SymSize size : symSizes)
    if (!size->isConstant())
      return true;
  return false;
}

} // namespace lowering
} // namespace kiln
