// Contraction kernels as GEMMs: the operands' strides are the coefficients of
// the loop variables in the load and store indices (each affine), A being the
// load that does not depend on the column and B the one that does not depend
// on the row. Depends on backend/cpu/CpuContraction.h, LLVM.
#include "backend/cpu/CpuContraction.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <unordered_map>

namespace kiln::backend {

using loop::Expr;
using loop::ExprKind;

namespace {

// An index as coefficients of the kernel's variables plus a constant.
struct AffineIndex {
  std::vector<int64_t> coefficients;
  int64_t offset = 0;
};

// The value of an integer index with every variable 0; nullopt where it
// reads anything but constants and variables under sums and products.
// Kernels are emitted on several threads at once: this reads the
// expression only (the program's ExprContext is not safe to grow from
// several threads, as substituting zeros would).
std::optional<int64_t> valueAtOrigin(const Expr *index) {
  switch (index->kind()) {
  case ExprKind::Constant:
    return index->dtype() == DType::Int64
               ? std::optional<int64_t>(index->integer())
               : std::nullopt;
  case ExprKind::Var:
    return 0;
  case ExprKind::Binary: {
    std::optional<int64_t> a = valueAtOrigin(index->operand(0));
    std::optional<int64_t> b = valueAtOrigin(index->operand(1));
    if (!a || !b)
      return std::nullopt;
    switch (index->binaryOp()) {
    case loop::BinaryOp::Add:
      return *a + *b;
    case loop::BinaryOp::Sub:
      return *a - *b;
    case loop::BinaryOp::Mul:
      return *a * *b;
    default:
      return std::nullopt;
    }
  }
  default:
    return std::nullopt;
  }
}

std::optional<AffineIndex> affineIndex(const Expr *index, size_t varCount) {
  AffineIndex result;
  for (size_t var = 0; var < varCount; ++var) {
    std::optional<int64_t> coefficient =
        loop::affineCoefficient(index, static_cast<int64_t>(var));
    if (!coefficient)
      return std::nullopt;
    result.coefficients.push_back(*coefficient);
  }
  std::optional<int64_t> offset = valueAtOrigin(index);
  if (!offset)
    return std::nullopt;
  result.offset = *offset;
  return result;
}

// `expr` in full for a cache key: every node's kind, dtype and operation,
// constants' bits, and loads by the argument slot (and dtype) of their
// buffer, so that equal keys mean equal code.
void writeExprKey(std::ostream &out, const Expr *expr,
                  const std::unordered_map<int64_t, int64_t> &slotOf,
                  const loop::Program &program) {
  out << '(' << int(expr->kind()) << ':' << int(expr->dtype());
  switch (expr->kind()) {
  case ExprKind::Constant: {
    double real = expr->real();
    uint64_t bits;
    std::memcpy(&bits, &real, sizeof bits);
    out << ':' << bits << ':' << expr->integer();
    break;
  }
  case ExprKind::Load:
    out << ":slot" << slotOf.at(expr->id()) << ':'
        << int(program.buffers[expr->id()].dtype());
    break;
  case ExprKind::Unary:
    out << ":u" << int(expr->unaryOp());
    break;
  case ExprKind::Binary:
    out << ":b" << int(expr->binaryOp());
    break;
  default:
    out << ':' << expr->id();
  }
  for (const Expr *operand : expr->operands())
    writeExprKey(out, operand, slotOf, program);
  out << ')';
}

} // namespace

std::optional<MatchedContraction> matchContraction(const loop::Program &program,
                                                   const loop::Kernel &kernel) {
  size_t outer = kernel.outerRanges.size();
  if (!kernel.contraction || (outer != 2 && outer != 3) ||
      kernel.loops.size() != 2)
    return std::nullopt;
  // The GEMM's blocking is chosen for its sizes: a product whose sizes vary
  // between calls runs as the loops it is.
  if (!kernel.outerRanges.isStatic() || !kernel.loops[0].ranges.isStatic())
    return std::nullopt;
  const loop::Loop &sum = kernel.loops[0], &last = kernel.loops[1];
  if (sum.ranges.size() != 1 || sum.reductions.size() != 1 ||
      !sum.stores.empty() || !last.ranges.empty() || !last.reductions.empty() ||
      last.stores.size() != 1)
    return std::nullopt;
  const loop::Reduction &reduction = sum.reductions[0];
  const Expr *product = reduction.value;
  if (reduction.op != loop::ReduceOp::Sum ||
      product->kind() != ExprKind::Binary ||
      product->binaryOp() != loop::BinaryOp::Mul ||
      product->dtype() != DType::Float32)
    return std::nullopt;
  const Expr *x = product->operand(0), *y = product->operand(1);
  const loop::Store &store = last.stores[0];
  if (x->kind() != ExprKind::Load || y->kind() != ExprKind::Load ||
      store.value->dtype() != DType::Float32)
    return std::nullopt;
  for (int64_t buffer : {x->id(), y->id(), store.buffer})
    if (program.buffers[buffer].dtype() != DType::Float32)
      return std::nullopt;
  // The stored value: the sum, or an epilogue over it that reads no other
  // reduction and nothing C's memory holds (a k block's partial sums are
  // kept in C until the last).
  MatchedContraction match;
  if (store.value->kind() != ExprKind::ReductionValue ||
      store.value->id() != 0) {
    if (loop::anyNode(store.value, [](const Expr *node) {
          return node->kind() == ExprKind::ReductionValue && node->id() != 0;
        }))
      return std::nullopt;
    for (const Expr *load : loop::loadsOf(store.value)) {
      if (program.rootOf(load->id()) == program.rootOf(store.buffer))
        return std::nullopt;
      if (std::find(match.epilogueBuffers.begin(), match.epilogueBuffers.end(),
                    load->id()) == match.epilogueBuffers.end())
        match.epilogueBuffers.push_back(load->id());
    }
    match.epilogue = store.value;
  }

  size_t varCount = outer + 1;
  size_t batchVar = 0, rowVar = outer - 2, columnVar = outer - 1,
         depthVar = outer;
  auto xIndex = affineIndex(x->index(), varCount);
  auto yIndex = affineIndex(y->index(), varCount);
  auto cIndex = affineIndex(store.index, varCount);
  if (!xIndex || !yIndex || !cIndex || cIndex->coefficients[depthVar] != 0)
    return std::nullopt;
  // A does not move with the column, B not with the row.
  bool xIsA =
      xIndex->coefficients[columnVar] == 0 && yIndex->coefficients[rowVar] == 0;
  bool yIsA =
      yIndex->coefficients[columnVar] == 0 && xIndex->coefficients[rowVar] == 0;
  if (!xIsA && !yIsA)
    return std::nullopt;
  const Expr *aLoad = xIsA ? x : y, *bLoad = xIsA ? y : x;
  const AffineIndex &a = xIsA ? *xIndex : *yIndex;
  const AffineIndex &b = xIsA ? *yIndex : *xIndex;

  GemmSpec &spec = match.spec;
  bool batched = outer == 3;
  Shape outerRanges = kernel.outerRanges.constants();
  spec.batch = batched ? outerRanges[0] : 1;
  spec.m = outerRanges[rowVar];
  spec.n = outerRanges[columnVar];
  spec.k = sum.ranges.constants()[0];
  spec.aBatch = batched ? a.coefficients[batchVar] : 0;
  spec.aRow = a.coefficients[rowVar];
  spec.aCol = a.coefficients[depthVar];
  spec.bBatch = batched ? b.coefficients[batchVar] : 0;
  spec.bRow = b.coefficients[depthVar];
  spec.bCol = b.coefficients[columnVar];
  spec.cBatch = batched ? cIndex->coefficients[batchVar] : 0;
  spec.cRow = cIndex->coefficients[rowVar];
  spec.cCol = cIndex->coefficients[columnVar];
  match.aOffset = a.offset;
  match.bOffset = b.offset;
  match.cOffset = cIndex->offset;
  match.a = aLoad->id();
  match.b = bLoad->id();
  match.c = store.buffer;
  return match;
}

std::optional<EmittedKernel>
emitContraction(llvm::Module &module, const loop::Program &program,
                const loop::Kernel &kernel, const std::string &name,
                const HostTarget &host, const MathLibrary &math,
                int64_t targetTiles, int threads,
                const std::unordered_set<int64_t> *fixedBuffers) {
  std::optional<MatchedContraction> match = matchContraction(program, kernel);
  if (!match)
    return std::nullopt;
  match->spec.targetTiles = std::max<int64_t>(targetTiles, 1);
  match->spec.threads = std::max(threads, 0);
  // The GEMM's buffers: A, B, C, then the epilogue's from its slot 4 on;
  // its slot 3 (the bias, unused) holds B packed ahead where B is fixed,
  // the kernel's last argument.
  if (fixedBuffers && fixedBuffers->count(program.rootOf(match->b)))
    match->spec.packedBSlot = 3;
  std::vector<int64_t> buffers = {match->a, match->b, match->c};
  std::unordered_map<int64_t, int64_t> slotOf;
  GemmEpilogue epilogue;
  if (match->epilogue) {
    for (int64_t buffer : match->epilogueBuffers) {
      slotOf[buffer] = static_cast<int64_t>(buffers.size()) + 1;
      buffers.push_back(buffer);
    }
    epilogue = contractionEpilogue(module, program, kernel, match->epilogue,
                                   slotOf, host, math);
    match->spec.costlyEpilogue = !loop::isCheapArithmetic(match->epilogue);
  }
  EmittedGemm gemm =
      emitGemm(module, match->spec, host, name + "_gemm", epilogue);
  gemm.function->setLinkage(llvm::GlobalValue::InternalLinkage);
  if (gemm.packB) {
    gemm.packB->setLinkage(llvm::GlobalValue::InternalLinkage);
    buffers.push_back(kPackedBSlot);
  }

  // The kernel (and its packing of B): the GEMM on its operands' first
  // elements; the epilogue's buffers as they are (its loads' indices are
  // from the data pointers).
  llvm::LLVMContext &context = module.getContext();
  llvm::Type *pointer = llvm::PointerType::getUnqual(context);
  int64_t offsets[] = {match->aOffset, match->bOffset, match->cOffset};
  auto wrap = [&](llvm::Function *inner, const std::string &wrapperName) {
    llvm::IRBuilder<> builder(context);
    auto *type = llvm::FunctionType::get(
        builder.getVoidTy(),
        {pointer, builder.getInt64Ty(), builder.getInt64Ty()}, false);
    llvm::Function *function = llvm::Function::Create(
        type, llvm::Function::ExternalLinkage, wrapperName, module);
    function->addFnAttr("target-cpu", host.cpuName);
    function->addFnAttr("target-features", host.features);
    function->setDoesNotThrow();
    builder.SetInsertPoint(
        llvm::BasicBlock::Create(context, "entry", function));
    llvm::Value *arguments = function->getArg(0);
    auto *slots = llvm::ArrayType::get(pointer, buffers.size() + 1);
    llvm::Value *operands = builder.CreateAlloca(slots, nullptr, "operands");
    for (size_t argument = 0; argument < buffers.size(); ++argument) {
      llvm::Value *base = builder.CreateLoad(
          pointer, builder.CreateConstGEP1_64(pointer, arguments, argument));
      size_t slot = argument < 3 ? argument : argument + 1;
      if (argument < 3)
        base = builder.CreateConstGEP1_64(builder.getFloatTy(), base,
                                          offsets[argument]);
      if (buffers[argument] == kPackedBSlot)
        slot = 3;
      builder.CreateStore(base,
                          builder.CreateConstGEP2_64(slots, operands, 0, slot));
    }
    builder.CreateCall(inner,
                       {operands, function->getArg(1), function->getArg(2)});
    builder.CreateRetVoid();
    return function;
  };

  EmittedKernel emitted;
  emitted.function = wrap(gemm.function, name);
  if (gemm.packB) {
    emitted.packB = wrap(gemm.packB, name + "_pack_b");
    emitted.packRange = gemm.packRange;
    emitted.packedBBytes = gemm.packedBBytes;
  }
  emitted.buffers = buffers;
  emitted.parallelRange = size::constant(gemm.parallelRange);
  emitted.equalUnits = true;
  const GemmSpec &spec = match->spec;
  emitted.work = size::constant(spec.batch * spec.m * spec.n *
                                std::max<int64_t>(spec.k, 1));
  // The code follows from the spec, the offsets and the CPU.
  std::ostringstream key;
  key << "gemm " << spec.batch << ' ' << spec.m << ' ' << spec.n << ' '
      << spec.k << ' ' << spec.aBatch << ' ' << spec.aRow << ' ' << spec.aCol
      << ' ' << spec.bBatch << ' ' << spec.bRow << ' ' << spec.bCol << ' '
      << spec.cBatch << ' ' << spec.cRow << ' ' << spec.cCol << ' '
      << match->aOffset << ' ' << match->bOffset << ' ' << match->cOffset << ' '
      << spec.targetTiles << ' ' << spec.threads << ' ' << spec.packedBSlot
      << ' ' << host.vectorBits << ' ' << host.cpuName << ' ' << host.features;
  if (match->epilogue) {
    key << " epilogue ";
    writeExprKey(key, match->epilogue, slotOf, program);
  }
  emitted.key = key.str();
  return emitted;
}

EmittedKernel emitCpuStep(llvm::Module &module, const loop::Program &program,
                          const loop::Kernel &kernel,
                          const KernelSchedule &schedule,
                          const std::string &name, const HostTarget &host,
                          const MathLibrary &math, int64_t targetTiles,
                          int threads,
                          const std::unordered_set<int64_t> *fixedBuffers) {
  if (kernel.contraction)
    if (std::optional<EmittedKernel> gemm =
            emitContraction(module, program, kernel, name, host, math,
                            targetTiles, threads, fixedBuffers))
      return std::move(*gemm); // its tiles are its own
  EmittedKernel emitted =
      emitCpuKernel(module, program, kernel, schedule, name, host, math);
  std::vector<SymSize> extents;
  for (size_t level = 0; level < schedule.parallelDepth; ++level)
    extents.push_back(schedule.parallelExtent(kernel, level));
  emitted.parallelRange = size::product(extents);
  // Ranges are never negative (sizes are at least 0).
  SymSize inner = size::constant(0);
  for (const loop::Loop &loop : kernel.loops)
    inner = size::add(inner, loop.ranges.numel());
  emitted.work = size::mul(kernel.outerRanges.numel(),
                           size::max(inner, size::constant(1)));
  // Chunks of whole vectors leave every chunk but the last without a tail.
  if (schedule.strategy == VectorStrategy::Outer &&
      kernel.outerRanges.size() == 1)
    emitted.alignment = schedule.lanes * schedule.unroll;
  return emitted;
}

} // namespace kiln::backend
