// Lowerings of matrix products (mm, addmm, bmm, baddbmm) to reduction
// kernels. A small product fuses with its bias and activation into one
// kernel instead of a call into torch. A larger float32 product on the CPU
// becomes a contraction kernel that the CPU backend emits as kiln's GEMM,
// in the JIT and in exports (on the 16-core Xeon it runs at 0.74-1.43x
// torch's MKL sgemm, and the JIT's threads no longer wait on OpenMP's),
// with its bias and a cheap pointwise kernel after it (a ReLU, a scale, a
// residual add) computed as it writes its result (passes/Fusion.cpp);
// other products above kMaxNativeWork multiply-adds stay externs that call
// torch's BLAS, or loop kernels where the program runs without torch.
// Depends on passes/lowerings/Lowerer.h.
#include "passes/lowerings/Lowerer.h"

namespace kiln::lowering {

namespace {

// Multiply-adds up to which a product is compiled rather than left to BLAS:
// below it, calling torch costs more than the arithmetic.
constexpr int64_t kMaxNativeWork = 1 << 13;
// The same for matrix-vector products (mv, addmv, dot), which fuse with
// what reads them where they are kernels.
constexpr int64_t kMaxNativeVectorWork = 1 << 16;

} // namespace

std::optional<LoweredTensor> matrixProduct(Lowerer &lowerer, LoweredTensor a,
                                           LoweredTensor b, DType dtype) {
  if (!isFloatingPoint(dtype) || a.dtype != dtype || b.dtype != dtype ||
      a.dim() != b.dim() || (a.dim() != 2 && a.dim() != 3))
    return std::nullopt;
  bool batched = a.dim() == 3;
  int64_t batch = batched ? a.sizes[0] : 1;
  int64_t m = a.sizes[a.dim() - 2], k = a.sizes[a.dim() - 1];
  int64_t n = b.sizes[b.dim() - 1];
  if (b.sizes[b.dim() - 2] != k || (batched && b.sizes[0] != batch))
    return std::nullopt;
  bool small = batch * m * n * std::max<int64_t>(k, 1) <= kMaxNativeWork;
  bool contraction = !small && dtype == DType::Float32 &&
                     lowerer.device().type == DeviceType::CPU;
  if (!small && !contraction && !lowerer.standalone())
    return std::nullopt;
  // A contraction reads its operands from buffers, as a GEMM does.
  auto inBuffer = [&](const LoweredTensor &operand) {
    if (!contraction || operand.realized())
      return operand;
    return lowerer.realize(operand,
                           contiguousMeta(operand.dtype, operand.sizes),
                           loop::BufferKind::Temporary, "matrix operand");
  };
  a = inBuffer(a);
  b = inBuffer(b);

  DType math = accumulationType(dtype);
  Shape inputSizes = batched ? Shape{batch, m, k, n} : Shape{m, k, n};
  int64_t reduced = batched ? 2 : 1;
  ReductionKernel kernel(lowerer, inputSizes, {reduced});
  const Index &index = kernel.index();
  Index rowIndex(index.begin(), index.begin() + reduced + 1);    // (b,) i, k
  Index columnIndex(index.begin(), index.begin() + reduced - 1); // (b,)
  columnIndex.push_back(index[reduced]);                         // k
  columnIndex.push_back(index[reduced + 1]);                     // j
  const Expr *element =
      lowerer.binary(BinaryOp::Mul, lowerer.cast(a.loader(rowIndex), math),
                     lowerer.cast(b.loader(columnIndex), math));
  const Expr *sum = kernel.reduce(ReduceOp::Sum, element);
  Shape resultSizes = batched ? Shape{batch, m, n} : Shape{m, n};
  LoweredTensor products = kernel.store(sum, contiguousMeta(math, resultSizes));
  if (contraction)
    kernel.markContraction();
  kernel.emit(batched ? "bmm" : "mm");
  return products;
}

namespace {

// The node's result from its `products` (in the accumulation type, of the
// result's sizes): `alpha * product + beta * bias` where a bias is given
// (argument `biasArgument`, beta and alpha at first + 2 and first + 3).
LoweringResult scaledProduct(Lowerer &lowerer, const Node &node,
                             const LoweredTensor &products, size_t first,
                             std::optional<size_t> biasArgument) {
  const TensorMeta &meta = lowerer.resultMeta(node);
  Shape resultSizes = products.sizes;
  DType math = products.dtype;
  double alpha = biasArgument ? doubleArgument(node, first + 3, 1.0) : 1.0;
  double beta = biasArgument ? doubleArgument(node, first + 2, 1.0) : 0.0;

  std::vector<LoweredTensor> inputs{products};
  // beta == 0 ignores the bias, NaN and Inf included, as torch does.
  bool withBias = biasArgument && beta != 0.0;
  if (withBias)
    inputs.push_back(lowerer.input(node, *biasArgument));
  LoweredTensor result = lowerer.pointwise(
      resultSizes, math, meta.dtype, inputs,
      [&lowerer, alpha, beta, withBias,
       math](const std::vector<const Expr *> &v) {
        const Expr *value = v[0];
        if (alpha != 1.0)
          value = lowerer.binary(BinaryOp::Mul, value,
                                 lowerer.constant(alpha, math));
        if (!withBias)
          return value;
        const Expr *bias = v[1];
        if (beta != 1.0)
          bias =
              lowerer.binary(BinaryOp::Mul, bias, lowerer.constant(beta, math));
        return lowerer.binary(BinaryOp::Add, bias, value);
      });
  return std::vector<LoweredTensor>{result};
}

// (batch) x M x K times (batch) x K x N, accumulated in `math`, then
// scaled and biased (baddbmm, addmm).
LoweringResult product(Lowerer &lowerer, const Node &node, size_t first,
                       std::optional<size_t> biasArgument) {
  std::optional<LoweredTensor> sums = matrixProduct(
      lowerer, lowerer.input(node, first), lowerer.input(node, first + 1),
      lowerer.resultMeta(node).dtype);
  if (!sums)
    return std::nullopt;
  return scaledProduct(lowerer, node, *sums, first, biasArgument);
}

// mv and addmv ([n, m] @ [m]) and dot ([k] . [k]): a row reduction of
// the products over m (memory-bound: a reduction kernel, not a GEMM of one
// column), accumulated in float32 for half types, then scaled and biased.
LoweringResult vectorProduct(Lowerer &lowerer, const Node &node, size_t first,
                             std::optional<size_t> biasArgument) {
  LoweredTensor a = lowerer.input(node, first);
  LoweredTensor b = lowerer.input(node, first + 1);
  DType dtype = lowerer.resultMeta(node).dtype;
  if (b.dim() != 1 || a.dim() < 1 || a.dim() > 2 || a.isSymbolic() ||
      b.isSymbolic() || !isFloatingPoint(dtype) || a.dtype != dtype ||
      b.dtype != dtype || a.sizes.back() != b.sizes[0])
    return std::nullopt;
  bool isDot = a.dim() == 1;
  int64_t rows = isDot ? 1 : a.sizes[0], depth = b.sizes[0];
  // A large product is torch's (BLAS's gemv ran a 4096 x 4096 product 1.6x
  // as fast as the reduction kernel here, a transposed one 3x), unless the
  // program runs without torch.
  if (rows * depth > kMaxNativeVectorWork && !lowerer.standalone())
    return std::nullopt;
  DType math = accumulationType(dtype);
  ReductionKernel kernel(lowerer, Shape{rows, depth}, {1});
  const Index &index = kernel.index();
  const Expr *element = lowerer.binary(
      BinaryOp::Mul,
      lowerer.cast(a.loader(isDot ? Index{index[1]} : index), math),
      lowerer.cast(b.loader(Index{index[1]}), math));
  const Expr *sum = kernel.reduce(ReduceOp::Sum, element);
  LoweredTensor products =
      kernel.store(sum, TensorMeta(math, isDot ? Shape{} : Shape{rows}));
  kernel.emit(isDot ? "dot" : "mv");
  return scaledProduct(lowerer, node, products, first, biasArgument);
}

// addr: alpha vec1[i] vec2[j] (+ beta self[i][j] where beta != 0), a
// pointwise tensor of the outer product's shape; bool's logical form is
// torch's.
LoweringResult addr(Lowerer &lowerer, const Node &node) {
  const TensorMeta &meta = lowerer.resultMeta(node);
  if (meta.dtype == DType::Bool || meta.isSymbolic())
    return std::nullopt;
  LoweredTensor first = lowerer.input(node, 1), second = lowerer.input(node, 2);
  Shape sizes = meta.sizes;
  std::vector<LoweredTensor> operands{
      lowerer.remap(first, sizes,
                    [](const Index &index) { return Index{index[0]}; }),
      lowerer.remap(second, sizes,
                    [](const Index &index) { return Index{index[1]}; })};
  double beta = doubleArgument(node, 3, 1.0),
         alpha = doubleArgument(node, 4, 1.0);
  if (beta != 0)
    operands.push_back(lowerer.input(node, 0));
  DType math = accumulationType(meta.dtype);
  return std::vector<LoweredTensor>{lowerer.pointwise(
      sizes, math, meta.dtype, operands,
      [&lowerer, alpha, beta, math](const std::vector<const Expr *> &v) {
        auto c = [&](double value) { return lowerer.constant(value, math); };
        const Expr *outer = lowerer.binary(BinaryOp::Mul, v[0], v[1]);
        if (alpha != 1)
          outer = lowerer.binary(BinaryOp::Mul, c(alpha), outer);
        if (beta == 0)
          return outer;
        const Expr *self =
            beta == 1 ? v[2] : lowerer.binary(BinaryOp::Mul, c(beta), v[2]);
        return lowerer.binary(BinaryOp::Add, self, outer);
      })};
}

// linalg_cross: component i is a[i+1] b[i+2] - a[i+2] b[i+1] (indices mod
// 3 along `dim`), over the operands' broadcast shape.
LoweringResult cross(Lowerer &lowerer, const Node &node) {
  const TensorMeta &meta = lowerer.resultMeta(node);
  LoweredTensor a = lowerer.input(node, 0), b = lowerer.input(node, 1);
  if (meta.isSymbolic() || a.dtype != meta.dtype || b.dtype != meta.dtype ||
      meta.dtype == DType::Bool)
    return std::nullopt;
  int64_t dim = wrapDim(node.arguments().at(2).toInt(), meta.dim());
  loop::ExprContext *exprs = &lowerer.exprs();
  // `tensor` read `shift` components on (the pointwise map broadcasts it;
  // its dim `dim` has 3 components, as the result's).
  auto shifted = [&](const LoweredTensor &tensor, int64_t shift) {
    return lowerer.remap(tensor, tensor.sizes, [=](const Index &index) {
      Index at = index;
      at[dim] = exprs->binary(BinaryOp::Mod,
                              exprs->add(index[dim], exprs->integer(shift)),
                              exprs->integer(3));
      return at;
    });
  };
  DType dtype = meta.dtype;
  return std::vector<LoweredTensor>{lowerer.pointwise(
      meta.sizes, dtype, dtype,
      {shifted(a, 1), shifted(b, 2), shifted(a, 2), shifted(b, 1)},
      [&lowerer](const std::vector<const Expr *> &v) {
        return lowerer.binary(BinaryOp::Sub,
                              lowerer.binary(BinaryOp::Mul, v[0], v[1]),
                              lowerer.binary(BinaryOp::Mul, v[2], v[3]));
      })};
}

LoweringResult mm(Lowerer &lowerer, const Node &node) {
  return product(lowerer, node, 0, std::nullopt);
}

LoweringResult mv(Lowerer &lowerer, const Node &node) {
  return vectorProduct(lowerer, node, 0, std::nullopt);
}

LoweringResult addmv(Lowerer &lowerer, const Node &node) {
  return vectorProduct(lowerer, node, 1, 0);
}

LoweringResult addmm(Lowerer &lowerer, const Node &node) {
  return product(lowerer, node, 1, 0);
}

} // namespace

void registerLinearAlgebraLowerings(LoweringTable &table) {
  table.insert({
      {"aten::mm", mm},
      {"aten::bmm", mm},
      {"aten::addmm", addmm},
      {"aten::baddbmm", addmm},
      {"aten::mv", mv},
      {"aten::dot", mv},
      {"aten::addmv", addmv},
      {"aten::addr", addr},
      {"aten::linalg_cross", cross},
  });
}

} // namespace kiln::lowering
