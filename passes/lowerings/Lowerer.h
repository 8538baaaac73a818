// The lowering's working state and the building blocks every op's lowering
// is written with: virtual tensors (loaders), pointwise maps, views,
// reduction kernels, and the table of lowerings by op name.
// Depends on ir/Graph.h and ir/LoopIR.h.
#pragma once

#include "ir/Graph.h"
#include "ir/LoopIR.h"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::lowering {

using loop::BinaryOp;
using loop::Expr;
using loop::ReduceOp;
using loop::UnaryOp;
using Index = std::vector<const Expr *>;
/// Sizes or strides as size expressions: constants where they do not vary
/// between calls, expressions over size symbols where they do.
using SymShape = std::vector<SymSize>;

/// `values` as constant size expressions.
SymShape constantShape(const Shape &values);
/// Row-major (contiguous) strides of `sizes`.
SymShape rowMajorStrides(const SymShape &sizes);
/// A tensor's sizes, strides and storage offset as size expressions.
SymShape symbolicSizes(const TensorMeta &meta);
SymShape symbolicStrides(const TensorMeta &meta);
SymSize symbolicOffset(const TensorMeta &meta);
/// Inductor's `inner_fn`: one Int64 index per dimension to an element.
using Loader = std::function<const Expr *(const Index &)>;

/// Where a realized tensor's elements are: a buffer that is not a View, and
/// the strides and element offset of the tensor relative to its data.
struct Placement {
  int64_t buffer = -1;
  SymShape strides;
  SymSize offset = size::constant(0);
};

/// A tensor during lowering: realized (placed in a buffer, possibly as a
/// view of it) or virtual (only a loader).
struct LoweredTensor {
  DType dtype = DType::Float32;
  /// The sizes in the example call (hints where they vary), and as size
  /// expressions (the Lowerer's helpers keep both).
  Shape sizes;
  SymShape symSizes;
  Loader loader;
  std::optional<Placement> placement;
  /// A load, or a cast or index rewrite of one: recomputed, not realized.
  bool cheap = false;

  int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
  bool realized() const { return placement.has_value(); }
  /// Whether some size varies between calls.
  bool isSymbolic() const;
};

/// The element of a pointwise tensor from its inputs' elements.
using PointwiseBody =
    std::function<const Expr *(const std::vector<const Expr *> &)>;

class Lowerer;
/// One op's lowering: a tensor per result, or nullopt to leave the node to
/// torch as an extern step.
using LoweringResult = std::optional<std::vector<LoweredTensor>>;
using LoweringFunction = LoweringResult (*)(Lowerer &, const Node &);
using LoweringTable = std::unordered_map<std::string, LoweringFunction>;

// One registration function per family (passes/lowerings/*.cpp).
void registerPointwiseLowerings(LoweringTable &table);
void registerReductionLowerings(LoweringTable &table);
void registerViewLowerings(LoweringTable &table);
void registerNormalizationLowerings(LoweringTable &table);
void registerTensorLowerings(LoweringTable &table);
void registerLinearAlgebraLowerings(LoweringTable &table);
void registerConvolutionLowerings(LoweringTable &table);
void registerIndexingLowerings(LoweringTable &table);

/// Every lowering, by qualified op name ("aten::add.Tensor").
const LoweringTable &loweringTable();

class Lowerer {
public:
  /// Lowers for tensors on `device` (the CPU by default); `standalone`: for
  /// a program that runs without torch (see lowerGraph).
  explicit Lowerer(std::shared_ptr<const Graph> graph, Device device = {},
                   bool standalone = false);
  loop::Program run();

  loop::ExprContext &exprs() { return *program_.exprs; }
  const loop::Program &program() const { return program_; }
  const Node &node() const { return *node_; }
  /// Whether the program runs without torch: a lowering that would leave a
  /// node to torch because torch runs it faster lowers it anyway.
  bool standalone() const { return standalone_; }
  const Graph &graph() const { return *graph_; }
  const Device &device() const { return device_; }
  /// Has the runtime check an input's elements before the first step that
  /// reads the input: every one in [0, check.size), or [-size, size) where
  /// check.fromEnd (loop::IndexCheck).
  void checkIndices(loop::IndexCheck check) {
    if (node_)
      check.origin = node_->origin();
    program_.indexChecks.push_back(std::move(check));
  }

  /// Argument `argument` of `node` as a tensor: a graph value's lowering,
  /// or a 0-d constant for a Python number (Bool, Int64 or Float64).
  LoweredTensor input(const Node &node, size_t argument);
  LoweredTensor lowered(const Value *value) const;
  /// Whether a node or a graph output reads `value`.
  bool isUsed(const Value *value) const {
    auto found = users_.find(value);
    return found != users_.end() && found->second > 0;
  }
  const TensorMeta &resultMeta(const Node &node, unsigned result = 0) const {
    return node.result(result)->meta();
  }

  // --- Expressions ---
  const Expr *constant(double value, DType dtype) {
    return exprs().constant(value, dtype);
  }
  const Expr *cast(const Expr *value, DType dtype) {
    return exprs().cast(value, dtype);
  }
  const Expr *unary(UnaryOp op, const Expr *value) {
    return exprs().unary(op, value);
  }
  const Expr *binary(BinaryOp op, const Expr *a, const Expr *b) {
    return exprs().binary(op, a, b);
  }
  const Expr *where(const Expr *condition, const Expr *then,
                    const Expr *otherwise) {
    return exprs().where(condition, then, otherwise);
  }
  /// a * b + c, fused where the target can: for a decomposition's own
  /// arithmetic only (see loop::ExprKind::MulAdd).
  const Expr *mulAdd(const Expr *a, const Expr *b, const Expr *c) {
    return exprs().mulAdd(a, b, c);
  }

  /// A size expression as index arithmetic (symbols read from the call).
  const Expr *size(SymSize value) { return exprs().size(value); }
  /// The example call's value of a size expression, for choices that only
  /// affect speed.
  int64_t hint(SymSize value) const;
  Shape hints(const SymShape &values) const;
  /// A contiguous meta of `sizes` (a symbolic layout where they vary).
  TensorMeta contiguous(DType dtype, const SymShape &sizes) const;
  /// A count of elements (a mean's divisor) as a value of `dtype`.
  const Expr *count(SymSize value, DType dtype);
  /// Whether the graph's sizes vary between calls.
  bool symbolic() const { return !graph_->symbols().empty(); }

  // --- Tensors ---
  /// A constant of `dtype` broadcast to `sizes`.
  LoweredTensor full(double value, DType dtype, Shape sizes);
  LoweredTensor full(double value, DType dtype, SymShape sizes);
  /// The tensor at `placement`: strided loads.
  LoweredTensor placed(const Placement &placement, DType dtype, Shape sizes);
  LoweredTensor placed(const Placement &placement, DType dtype, SymShape sizes);
  /// A virtual tensor of `sizes` computed from `inputs` (broadcast to
  /// `sizes`, each cast to `computation`); the body's result is cast to
  /// `result`.
  LoweredTensor pointwise(Shape sizes, DType computation, DType result,
                          const std::vector<LoweredTensor> &inputs,
                          const PointwiseBody &body);
  LoweredTensor pointwise(SymShape sizes, DType computation, DType result,
                          const std::vector<LoweredTensor> &inputs,
                          const PointwiseBody &body);
  /// The same, with a computation dtype per input.
  LoweredTensor pointwise(Shape sizes, const std::vector<DType> &computations,
                          DType result,
                          const std::vector<LoweredTensor> &inputs,
                          const PointwiseBody &body);
  LoweredTensor pointwise(SymShape sizes,
                          const std::vector<DType> &computations, DType result,
                          const std::vector<LoweredTensor> &inputs,
                          const PointwiseBody &body);
  /// A virtual tensor whose element at index i is `source` at `map(i)`.
  LoweredTensor remap(const LoweredTensor &source, Shape sizes,
                      std::function<Index(const Index &)> map);
  LoweredTensor remap(const LoweredTensor &source, SymShape sizes,
                      std::function<Index(const Index &)> map);
  /// Realizes `tensor` in a new buffer laid out as `meta` says (offset 0),
  /// storing it with a pointwise kernel; returns the placed tensor.
  LoweredTensor realize(const LoweredTensor &tensor, const TensorMeta &meta,
                        loop::BufferKind kind, const std::string &what);
  /// Leaves `node` to torch, reading each value of `operands` from the
  /// tensor given for it (realized in a layout torch's kernel runs faster
  /// with: a convolution's input in channels-last) instead of the value's
  /// own buffer, its results laid out as `resultMetas` say (the layout
  /// torch gives for those operands; a call that gives another is copied
  /// into it). The results are loads from those buffers, no graph value's
  /// buffer: a graph output or another extern's operand is a copy in the
  /// node's own layout.
  std::vector<LoweredTensor> externCall(
      const Node &node,
      const std::vector<std::pair<const Value *, LoweredTensor>> &operands,
      const std::vector<TensorMeta> &resultMetas);
  /// Whether `load`, with Var(d) for dim d of its buffer, reads the element
  /// at that position: no offset, each variable stepping by its dim's
  /// stride (a tensor that is its buffer, element by element).
  bool readsOwnPosition(const Expr *load);
  /// `tensor`'s element at the point (v0, v1, ...) of its own sizes.
  const Expr *element(const LoweredTensor &tensor);
  /// The memory format of a channels-last buffer of `tensor`'s sizes that
  /// it reads element by element at its own position (a convolution's
  /// result through batch norm and ReLU); Contiguous where it reads none.
  MemoryFormat sourceFormat(const LoweredTensor &tensor);
  /// `tensor`, or where it is more than a load, a temporary it is computed
  /// into once (named after `what`, laid out as temporaryLayout says): for
  /// ops whose every output reads each input element several times (a
  /// convolution, a pool's windows, bilinear upsampling).
  LoweredTensor readable(const LoweredTensor &tensor, const std::string &what);
  /// The same for a pool's windows, which read each element a few times:
  /// an expression of few operations of cheap arithmetic (a batch norm's
  /// scale and shift and a ReLU) stays inline, computed again at each of
  /// its reads rather than written and read back.
  LoweredTensor readableByWindows(const LoweredTensor &tensor,
                                  const std::string &what);
  /// `tensor`, the value `value` lowers to, realized as a tensor torch can
  /// read (an extern call's operand) laid out as `layout`: once per value
  /// and layout, so that calls given the same copy (a weight that two
  /// convolutions share) read one.
  LoweredTensor operandCopy(const Value *value, const LoweredTensor &tensor,
                            const TensorMeta &layout, const std::string &what);
  /// The layout to realize `tensor` in as a temporary (`meta`, of its
  /// sizes, or channels-last where it is computed element by element from
  /// a channels-last tensor of its shape).
  TensorMeta temporaryLayout(const LoweredTensor &tensor,
                             const TensorMeta &meta);
  /// A new buffer of `kind` with `meta` (storage offset 0).
  int64_t addBuffer(const TensorMeta &meta, loop::BufferKind kind,
                    const std::string &what);
  /// Appends a kernel, named after `what` and origin'ed after the node.
  void addKernel(loop::Kernel kernel, const std::string &what);
  /// "aten::_softmax (from x.softmax(-1))".
  std::string origin() const;

private:
  friend class ReductionKernel;
  void lowerNode(const Node &node);
  void lowerExtern(const Node &node);
  void afterNode(const Node &node);
  /// Whether a virtual tensor's element takes more operations than one
  /// kernel should hold (loop::kMaxKernelOperations): it is realized, and
  /// its readers load it.
  bool tooLongToInline(const LoweredTensor &tensor);
  int64_t bufferOfValue(const Value *value, bool mustBeTensor);
  int64_t outputBuffer(const Value *value);
  int64_t viewBufferFor(const Placement &placement, const Shape &sizes,
                        bool mustBeTensor);
  void realizeBeforeMutation();

  std::shared_ptr<const Graph> graph_;
  Device device_;
  bool standalone_ = false;
  loop::Program program_;
  const Node *node_ = nullptr;
  std::unordered_map<const Value *, LoweredTensor> tensors_;
  std::unordered_map<const Value *, int> users_;
  std::unordered_map<const Value *, int> remainingUses_;
  std::unordered_map<const Value *, bool> isOutput_;
  std::map<std::pair<const Value *, Shape>, LoweredTensor> operandCopies_;
  int kernelCount_ = 0;
};

/// One reduction kernel: outer loops over the kept dims of `inputSizes`, a
/// loop per pass over the reduced `dims`, and a final loop storing results.
class ReductionKernel {
public:
  ReductionKernel(Lowerer &lowerer, const Shape &inputSizes,
                  std::vector<int64_t> dims);
  ReductionKernel(Lowerer &lowerer, const SymShape &inputSizes,
                  std::vector<int64_t> dims);
  /// The input's index inside a pass: outer and reduction variables.
  const Index &index() const { return index_; }
  /// The number of reduced elements; its example-call value where it
  /// varies (symbolicReducedNumel is the expression).
  int64_t reducedNumel() const { return lowerer_.hint(reducedNumel_); }
  SymSize symbolicReducedNumel() const { return reducedNumel_; }
  /// Adds a reduction to the current pass; its value for later passes and
  /// the final stores.
  const Expr *reduce(ReduceOp op, const Expr *value);
  /// Starts another pass over the reduced dims (reads earlier results).
  void newPass();
  /// Stores `value` into a new buffer laid out as `meta` (the kept dims,
  /// with or without size-1 reduced dims).
  LoweredTensor store(const Expr *value, const TensorMeta &meta);
  void emit(const std::string &what);
  /// Marks the kernel as a matrix product (loop::Kernel::contraction).
  void markContraction() { kernel_.contraction = true; }

private:
  Lowerer &lowerer_;
  SymShape inputSizes_;
  std::vector<int64_t> dims_;
  std::vector<bool> reduced_;
  Index index_;
  SymSize reducedNumel_ = size::constant(1);
  loop::Kernel kernel_;
  loop::Loop final_;
  int64_t reductions_ = 0;
};

// --- Helpers shared by the families ---

/// Argument `index` of `node` as a number, or `otherwise` where it is None
/// or not given.
double doubleArgument(const Node &node, size_t index, double otherwise);
/// Wraps a possibly negative dim.
int64_t wrapDim(int64_t dim, int64_t ndim);
/// The reduced dims of a `dim` argument (None or [] means all).
std::vector<int64_t> reductionDims(const Argument &dims, int64_t ndim);
/// Whether `dtype` is computed in float32 by eager's reductions and
/// normalizations (float16, bfloat16).
bool isReducedFloat(DType dtype);
/// The dtype eager accumulates in: float32 for half types.
DType accumulationType(DType dtype);
/// log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), eager's formula, for a
/// value `x` of `math` (log_sigmoid, the logits' cross entropy).
const Expr *logSigmoid(Lowerer &lowerer, const Expr *x, DType math);
/// A reduction of `input` over `dims` in one kernel: `op`'s value cast to
/// `accumulate`, and `epilogue` applied to the result before it is stored
/// in `meta`'s dtype and layout.
LoweredTensor
reduceTensor(Lowerer &lowerer, const LoweredTensor &input,
             const std::vector<int64_t> &dims, ReduceOp op, DType accumulate,
             const TensorMeta &meta, const std::string &what,
             const std::function<const Expr *(const Expr *)> &epilogue = {});
/// The mean of `element` (an input element at `kernel.index()`, in
/// `dtype`) over the kernel's reduced dims, and in a second pass the sum of
/// squared deviations from it: the two-pass variance that var/std and the
/// normalizations share.
struct Deviations {
  const Expr *mean;
  const Expr *squaredDeviations;
};
Deviations meanAndSquaredDeviations(Lowerer &lowerer, ReductionKernel &kernel,
                                    const Expr *element, DType dtype);
/// `sizes` with `dims` kept as size 1 (keepdim) or removed.
Shape reducedShape(const Shape &sizes, const std::vector<int64_t> &dims,
                   bool keepdim);
SymShape reducedShape(const SymShape &sizes, const std::vector<int64_t> &dims,
                      bool keepdim);
/// A contiguous meta.
TensorMeta contiguousMeta(DType dtype, const Shape &sizes);
/// a @ b, 2-d or batched 3-d, of `dtype` operands, summed in its
/// accumulation type (the result's dtype): kiln's GEMM (a contraction
/// kernel reading its operands from buffers) for a float32 product on the
/// CPU above a few thousand multiply-adds, a reduction kernel for a small
/// one or where the program runs without torch; nullopt otherwise (torch
/// computes it). LinearAlgebraLowerings.cpp.
std::optional<LoweredTensor> matrixProduct(Lowerer &lowerer, LoweredTensor a,
                                           LoweredTensor b, DType dtype);

} // namespace kiln::lowering
