// Contraction kernels as GEMMs: the operands' strides are the coefficients of
// the loop variables in the load and store indices (each affine), A being the
// load that does not depend on the column and B the one that does not depend
// on the row. Depends on backend/cpu/CpuContraction.h, LLVM.
#include "backend/cpu/CpuContraction.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <cstring>
#include <limits>
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

// An index that is affine in the kernel's variables once clamps are seen
// through: max(e, constant) and min(e, constant) read as e, each noted
// with the bound it needs (an operand read under a `where` that keeps e
// inside them, so the clamp never changes it). Reads the expression only.
struct Clamp {
  AffineIndex clamped;
  bool lower; // max(e, bound): needs e >= bound; min: e <= bound
  int64_t bound;
};

std::optional<AffineIndex> affineThroughClamps(const Expr *index,
                                               size_t varCount,
                                               std::vector<Clamp> &clamps) {
  switch (index->kind()) {
  case ExprKind::Constant:
    if (index->dtype() != DType::Int64)
      return std::nullopt;
    return AffineIndex{std::vector<int64_t>(varCount, 0), index->integer()};
  case ExprKind::Var: {
    if (index->id() < 0 || static_cast<size_t>(index->id()) >= varCount)
      return std::nullopt;
    AffineIndex var{std::vector<int64_t>(varCount, 0), 0};
    var.coefficients[index->id()] = 1;
    return var;
  }
  case ExprKind::Binary: {
    loop::BinaryOp op = index->binaryOp();
    const Expr *left = index->operand(0), *right = index->operand(1);
    if (op == loop::BinaryOp::Max || op == loop::BinaryOp::Min) {
      if (!right->isConstant() || right->dtype() != DType::Int64)
        return std::nullopt;
      std::optional<AffineIndex> inner =
          affineThroughClamps(left, varCount, clamps);
      if (inner)
        clamps.push_back({*inner, op == loop::BinaryOp::Max, right->integer()});
      return inner;
    }
    std::optional<AffineIndex> a = affineThroughClamps(left, varCount, clamps);
    std::optional<AffineIndex> b = affineThroughClamps(right, varCount, clamps);
    if (!a || !b)
      return std::nullopt;
    if (op == loop::BinaryOp::Add || op == loop::BinaryOp::Sub) {
      int64_t sign = op == loop::BinaryOp::Add ? 1 : -1;
      for (size_t var = 0; var < varCount; ++var)
        a->coefficients[var] += sign * b->coefficients[var];
      a->offset += sign * b->offset;
      return a;
    }
    if (op == loop::BinaryOp::Mul) {
      auto isConstant = [](const AffineIndex &x) {
        return std::all_of(x.coefficients.begin(), x.coefficients.end(),
                           [](int64_t c) { return c == 0; });
      };
      if (!isConstant(*a) && !isConstant(*b))
        return std::nullopt;
      if (isConstant(*a))
        std::swap(a, b);
      for (int64_t &coefficient : a->coefficients)
        coefficient *= b->offset;
      a->offset *= b->offset;
      return a;
    }
    return std::nullopt;
  }
  default:
    return std::nullopt;
  }
}

// The bounds a `where`'s condition puts on affine forms of the variables:
// a conjunction of comparisons of an affine form with a constant, as
// half-open intervals [lower, upper) of each form (without its constant).
struct FormBounds {
  std::vector<int64_t> coefficients;
  int64_t lower = std::numeric_limits<int32_t>::min();
  int64_t upper = std::numeric_limits<int32_t>::max();
};

bool collectBounds(const Expr *condition, size_t varCount,
                   std::vector<FormBounds> &bounds) {
  if (condition->kind() != ExprKind::Binary)
    return false;
  loop::BinaryOp op = condition->binaryOp();
  if (op == loop::BinaryOp::LogicalAnd)
    return collectBounds(condition->operand(0), varCount, bounds) &&
           collectBounds(condition->operand(1), varCount, bounds);
  if (op != loop::BinaryOp::Ge && op != loop::BinaryOp::Gt &&
      op != loop::BinaryOp::Lt && op != loop::BinaryOp::Le)
    return false;
  std::vector<Clamp> clamps;
  std::optional<AffineIndex> left =
      affineThroughClamps(condition->operand(0), varCount, clamps);
  std::optional<AffineIndex> right =
      affineThroughClamps(condition->operand(1), varCount, clamps);
  if (!left || !right || !clamps.empty() ||
      std::any_of(right->coefficients.begin(), right->coefficients.end(),
                  [](int64_t c) { return c != 0; }))
    return false;
  // form + left.offset (op) right.offset, as a bound on the form.
  int64_t constant = right->offset - left->offset;
  FormBounds *form = nullptr;
  for (FormBounds &existing : bounds)
    if (existing.coefficients == left->coefficients)
      form = &existing;
  if (!form) {
    bounds.push_back({left->coefficients});
    form = &bounds.back();
  }
  switch (op) {
  case loop::BinaryOp::Ge:
    form->lower = std::max(form->lower, constant);
    break;
  case loop::BinaryOp::Gt:
    form->lower = std::max(form->lower, constant + 1);
    break;
  case loop::BinaryOp::Lt:
    form->upper = std::min(form->upper, constant);
    break;
  default:
    form->upper = std::min(form->upper, constant + 1);
  }
  return true;
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
  // Outer ranges [row, column] or [batch, row, column digits...]; one loop
  // summing over the k digits, then one store. A convolution's product is
  // [image, out channel, output position digits...] over (channel, taps...).
  size_t outer = kernel.outerRanges.size();
  if (!kernel.contraction || outer < 2 || kernel.loops.size() != 2)
    return std::nullopt;
  // The GEMM's blocking is chosen for its sizes: a product whose sizes vary
  // between calls runs as the loops it is.
  if (!kernel.outerRanges.isStatic() || !kernel.loops[0].ranges.isStatic())
    return std::nullopt;
  const loop::Loop &sum = kernel.loops[0], &last = kernel.loops[1];
  if (sum.ranges.size() < 1 || sum.reductions.size() != 1 ||
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
  // An operand is a load, or a load where a condition holds and 0 elsewhere.
  auto operand = [](const Expr *value, const Expr *&condition) -> const Expr * {
    condition = nullptr;
    if (value->kind() == ExprKind::Where) {
      const Expr *otherwise = value->operand(2);
      if (!otherwise->isConstant() || otherwise->real() != 0.0)
        return nullptr;
      condition = value->operand(0);
      value = value->operand(1);
    }
    return value->kind() == ExprKind::Load ? value : nullptr;
  };
  const Expr *xCondition, *yCondition;
  const Expr *x = operand(product->operand(0), xCondition);
  const Expr *y = operand(product->operand(1), yCondition);
  const loop::Store &store = last.stores[0];
  if (!x || !y || store.value->dtype() != DType::Float32)
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

  Shape outerRanges = kernel.outerRanges.constants();
  Shape depthRanges = sum.ranges.constants();
  bool batched = outer >= 3;
  size_t rowVar = batched ? 1 : 0, firstColumn = rowVar + 1;
  size_t depthVars = depthRanges.size();
  size_t varCount = outer + depthVars;
  std::vector<int64_t> columnExtents(outerRanges.begin() + firstColumn,
                                     outerRanges.end());
  auto isColumn = [&](size_t var) { return var >= firstColumn && var < outer; };
  auto isDepth = [&](size_t var) { return var >= outer; };
  // The stride of a group of digits read as one flat index (row-major),
  // where their coefficients allow it.
  auto flatStride =
      [](const AffineIndex &index, size_t first,
         const std::vector<int64_t> &extents) -> std::optional<int64_t> {
    size_t lastDigit = first + extents.size() - 1;
    for (size_t digit = first; digit < lastDigit; ++digit)
      if (extents[digit - first] != 1 &&
          index.coefficients[digit] !=
              index.coefficients[digit + 1] * extents[digit + 1 - first])
        return std::nullopt;
    return index.coefficients[lastDigit];
  };
  std::vector<Clamp> xClamps, yClamps, cClamps;
  auto xIndex = affineThroughClamps(x->index(), varCount, xClamps);
  auto yIndex = affineThroughClamps(y->index(), varCount, yClamps);
  auto cIndex = affineThroughClamps(store.index, varCount, cClamps);
  if (!xIndex || !yIndex || !cIndex || !cClamps.empty())
    return std::nullopt;
  auto movesWith = [&](const AffineIndex &index, auto which) {
    for (size_t var = 0; var < varCount; ++var)
      if (which(var) && index.coefficients[var] != 0)
        return true;
    return false;
  };
  if (movesWith(*cIndex, isDepth))
    return std::nullopt;
  // A does not move with the columns, B not with the row; A is a plain
  // load.
  bool xIsA = !movesWith(*xIndex, isColumn) &&
              yIndex->coefficients[rowVar] == 0 && !xCondition;
  bool yIsA = !xIsA && !movesWith(*yIndex, isColumn) &&
              xIndex->coefficients[rowVar] == 0 && !yCondition;
  if (!xIsA && !yIsA)
    return std::nullopt;
  const Expr *aLoad = xIsA ? x : y, *bLoad = xIsA ? y : x;
  const Expr *bCondition = xIsA ? yCondition : xCondition;
  const AffineIndex &a = xIsA ? *xIndex : *yIndex;
  const AffineIndex &b = xIsA ? *yIndex : *xIndex;
  const std::vector<Clamp> &aClamps = xIsA ? xClamps : yClamps;
  const std::vector<Clamp> &bClamps = xIsA ? yClamps : xClamps;
  std::optional<int64_t> aDepth = flatStride(a, outer, depthRanges);
  std::optional<int64_t> cColumn =
      flatStride(*cIndex, firstColumn, columnExtents);
  if (!aClamps.empty() || !aDepth || !cColumn)
    return std::nullopt;

  GemmSpec &spec = match.spec;
  spec.batch = batched ? outerRanges[0] : 1;
  spec.m = outerRanges[rowVar];
  spec.n = 1;
  for (int64_t extent : columnExtents)
    spec.n *= extent;
  spec.k = 1;
  for (int64_t extent : depthRanges)
    spec.k *= extent;
  spec.aBatch = batched ? a.coefficients[0] : 0;
  spec.aRow = a.coefficients[rowVar];
  spec.aCol = *aDepth;
  spec.bBatch = batched ? b.coefficients[0] : 0;
  spec.cBatch = batched ? cIndex->coefficients[0] : 0;
  spec.cRow = cIndex->coefficients[rowVar];
  spec.cCol = *cColumn;
  std::optional<int64_t> bDepth = flatStride(b, outer, depthRanges);
  std::optional<int64_t> bColumn = flatStride(b, firstColumn, columnExtents);
  if (!bCondition && bClamps.empty() && bDepth && bColumn) {
    spec.bRow = *bDepth;
    spec.bCol = *bColumn;
  } else {
    // B as windows: its address and each bound of the condition split
    // into a part of the k digits and one of the column digits, in 32-bit
    // lanes; every clamp of its index within a bound (so never applied).
    std::vector<FormBounds> bounds;
    if (bCondition && !collectBounds(bCondition, varCount, bounds))
      return std::nullopt;
    WindowedOperand window;
    window.depthExtents = depthRanges;
    window.columnExtents = columnExtents;
    auto split = [&](const std::vector<int64_t> &coefficients,
                     std::vector<int64_t> &depth,
                     std::vector<int64_t> &column) {
      int64_t span = 0;
      for (size_t var = 0; var < varCount; ++var) {
        int64_t extent =
            var < outer ? outerRanges[var] : depthRanges[var - outer];
        if (isDepth(var))
          depth.push_back(coefficients[var]);
        else if (isColumn(var))
          column.push_back(coefficients[var]);
        else if (coefficients[var] != 0 && !(batched && var == 0))
          return false; // the row
        if (!(batched && var == 0))
          span +=
              std::abs(coefficients[var]) * std::max<int64_t>(extent - 1, 0);
      }
      return span < (int64_t(1) << 30);
    };
    if (!split(b.coefficients, window.depthStrides, window.columnStrides))
      return std::nullopt;
    for (const FormBounds &form : bounds) {
      WindowedOperand::Range range;
      if (!split(form.coefficients, range.depth, range.column) ||
          (batched && form.coefficients[0] != 0) || form.upper <= form.lower ||
          form.upper - form.lower > std::numeric_limits<int32_t>::max() ||
          std::abs(form.lower) >= (int64_t(1) << 30))
        return std::nullopt;
      range.offset = -form.lower;
      range.limit = form.upper - form.lower;
      window.ranges.push_back(std::move(range));
    }
    for (const Clamp &clamp : bClamps) {
      bool kept = false;
      for (const FormBounds &form : bounds)
        if (form.coefficients == clamp.clamped.coefficients)
          kept = kept ||
                 (clamp.lower
                      ? form.lower + clamp.clamped.offset >= clamp.bound
                      : form.upper - 1 + clamp.clamped.offset <= clamp.bound);
      if (!kept)
        return std::nullopt;
    }
    spec.windowedB = std::move(window);
  }
  // An epilogue over several column digits reads them as the flat column
  // (loop::loadsReadDigitsFlat, as Fusion fused it), its loads at indices
  // affine in the kernel's variables without clamps.
  if (match.epilogue && columnExtents.size() > 1) {
    if (!loop::loadsReadDigitsFlat(
            match.epilogue, static_cast<int64_t>(firstColumn), columnExtents))
      return std::nullopt;
    for (const Expr *load : loop::loadsOf(match.epilogue)) {
      std::vector<Clamp> clamps;
      if (!affineThroughClamps(load->index(), varCount, clamps) ||
          !clamps.empty())
        return std::nullopt;
    }
  }
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
  if (fixedBuffers && !match->spec.windowedB &&
      fixedBuffers->count(program.rootOf(match->b)))
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
    setTargetAttributes(*function, host);
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
  if (spec.windowedB) {
    const WindowedOperand &window = *spec.windowedB;
    key << " windows";
    for (const std::vector<int64_t> *list :
         {&window.depthExtents, &window.columnExtents, &window.depthStrides,
          &window.columnStrides}) {
      key << " [";
      for (int64_t value : *list)
        key << value << ',';
      key << ']';
    }
    for (const WindowedOperand::Range &range : window.ranges) {
      key << " range";
      for (int64_t value : range.depth)
        key << ' ' << value;
      key << ';';
      for (int64_t value : range.column)
        key << ' ' << value;
      key << "; " << range.offset << ' ' << range.limit;
    }
  }
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
