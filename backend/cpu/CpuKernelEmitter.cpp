// One loop-IR kernel as a host-CPU LLVM function on backend/llvm/: the CPU's
// vectors, gathers, streaming stores, SLEEF, Kahan blocks, carried values.
// Depends on backend/cpu/*.h, backend/llvm/*.h, ir/, LLVM.
#include "backend/cpu/CpuKernelEmitter.h"

#include "backend/cpu/MathLibrary.h"
#include "backend/llvm/ExprEmitter.h"
#include "backend/llvm/LoopEmitter.h"
#include "backend/llvm/ReductionAlgebra.h"
#include "ir/Error.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <limits>
#include <tuple>
#include <unordered_map>

namespace kiln::backend {
namespace {

using loop::BinaryOp;
using loop::Expr;
using loop::ExprKind;
using loop::ReduceOp;
using loop::UnaryOp;

// Elements a float sum adds before the block's partial sum is folded into
// the (compensated) total, per lane.
constexpr int64_t kSumBlockPerLane = 256;

// The most points of a reduction loop under a vector of output points that
// are emitted one by one (a 3x3 or 4x4 window), not as loops.
constexpr int64_t kMaxUnrolledPoints = 16;

// The product of `ranges` where each is a constant.
std::optional<int64_t> constantPoints(const std::vector<SymSize> &ranges) {
  int64_t points = 1;
  for (SymSize range : ranges) {
    std::optional<int64_t> value = range->constant();
    if (!value)
      return std::nullopt;
    points *= *value;
  }
  return points;
}

/// The values that carry a reduction across the points of its loop, as
/// stack slots that SROA turns into registers.
struct Accumulator {
  llvm::AllocaInst *value = nullptr;
  llvm::AllocaInst *index = nullptr;        // ArgMax/ArgMin
  llvm::AllocaInst *partial = nullptr;      // float Sum: the current block
  llvm::AllocaInst *compensation = nullptr; // float Sum: Kahan's error term
  int lanes = 1;
};

class CpuKernelEmitter : public ExprEmitter {
public:
  CpuKernelEmitter(llvm::Module &module, const loop::Program &program,
                   const loop::Kernel &kernel, const KernelSchedule &schedule,
                   const HostTarget &host, const MathLibrary &math)
      : ExprEmitter(module, program, "the CPU code generator"), kernel_(kernel),
        schedule_(schedule), host_(host), math_(math), algebra_(*this),
        outerCount_(static_cast<int64_t>(kernel.outerRanges.size())) {}

  EmittedKernel emitFunction(const std::string &name);

protected:
  llvm::Value *bufferPointer(int64_t buffer) override;
  llvm::Value *symbolValue(int64_t number) override;
  llvm::Value *loadElements(const Expr *expr, DType dtype,
                            bool vector) override;
  llvm::Value *callMath(const char *name,
                        std::vector<llvm::Value *> args) override;
  llvm::Value *emitMathFunction(UnaryOp op, llvm::Value *x) override;
  bool dividesByConstantsAsProducts() const override {
    return schedule_.constantQuotientsAsProducts;
  }
  bool exactRemaindersInFloat64() const override { return true; }
  /// Carried values: loaded by their consumers, stored by their producer.
  llvm::Value *reuse(const Expr *expr, bool vector) override;
  void computed(const Expr *expr, llvm::Value *value) override;

private:
  /// An index contiguous along the vector but at an edge: terms the lanes
  /// share plus either min(max(t, low), high) (or max(min(t, high), low)),
  /// a padded window's or a pad's column, where the lanes inside [low, high]
  /// read one contiguous run; or mod(t, modulus) with a modulus of at least
  /// the lanes, a roll's column, which wraps at most once: the lanes before
  /// the wrap read one run, those after it another. t has coefficient 1 in
  /// the vector's variable.
  struct EdgedRun {
    std::vector<const Expr *> shared;
    const Expr *position = nullptr; // t
    const Expr *wrapped = nullptr;  // mod(t, modulus), or nullptr: a clamp
    int64_t low = 0, high = 0, modulus = 0;
    /// t's coefficient: lanes `stride` elements apart (a clamped run only).
    int64_t stride = 1;
  };
  std::optional<EdgedRun> edgedRun(const Expr *index);
  /// The points of the vectorised loop where a comparison of its variable
  /// with a constant changes (cat's and pad's selects), at most a few.
  std::vector<int64_t> segmentCuts(size_t level);
  std::optional<bool> knownComparison(const Expr *expr) override;
  /// The elements of an edged run without a gather: a clamped run's lanes
  /// inside the bounds as one masked contiguous load, the edge element in
  /// the others; a wrapped run's as two masked contiguous loads.
  llvm::Value *loadEdgedRun(const EdgedRun &run, llvm::Type *storage,
                            llvm::Value *base, llvm::Type *vectorType);
  /// The lanes of a run `stride` elements apart from `start` (2 to 4: a
  /// stride-2 window, x[..., ::2]) where `inside` holds (all lanes where
  /// null), without a gather: one masked load of the span they cover, its
  /// every stride-th element picked by a shuffle. Elements between the
  /// lanes are read; none past the last lane's or where `inside` fails.
  llvm::Value *loadStridedRun(llvm::Type *storage, llvm::Value *start,
                              int64_t stride, llvm::Value *inside);
  void emitStores(const std::vector<loop::Store> &stores);
  void emitOuter(size_t level);
  void emitVectorLoops(size_t level, llvm::Value *start, llvm::Value *end);
  void emitRowwise(size_t level, llvm::Value *start, llvm::Value *end);
  /// The points [start, end) of the vectorised loop (outer loop `level`) in
  /// vectors of each of `widths`, then one by one: `body` gets each first
  /// point, with the loop's variable set and the vector entered.
  void sweep(size_t level, llvm::Value *start, llvm::Value *end,
             const std::vector<int> &widths, LoopBody body);
  /// The values at `offset` of the rowwise arrays of the kernel's first
  /// `count` reductions, as the reductions' values.
  void loadRowwiseValues(size_t count, llvm::Value *offset);
  struct RowwiseArrays;
  /// The element at `offset` of one of a reduction's rowwise arrays, as
  /// many lanes as the current vector's.
  llvm::Value *loadRowwise(const RowwiseArrays &arrays, llvm::AllocaInst *array,
                           llvm::Value *offset);
  void storeRowwise(const RowwiseArrays &arrays, llvm::AllocaInst *array,
                    llvm::Value *offset, llvm::Value *value);
  void emitTransposedTiles(llvm::Value *tile);
  void emitTransposedTile(llvm::Value *uStart, llvm::Value *vStart);
  llvm::Value *alignedStart(size_t var, llvm::Value *start, llvm::Value *end);
  llvm::Value *emitAlignmentPeel(size_t level, llvm::Value *start,
                                 llvm::Value *end);
  void emitPoint();
  void emitLoopNest(size_t loopIndex, size_t reductionBase);
  /// `blocks`: float sums add in blocks, folded with compensation.
  std::vector<Accumulator> makeAccumulators(const loop::Loop &loop, int lanes,
                                            bool blocks = true);
  void accumulate(const loop::Loop &loop, std::vector<Accumulator> &accs,
                  llvm::Value *position);
  void resetPartials(const loop::Loop &loop, std::vector<Accumulator> &accs);
  void foldPartials(const loop::Loop &loop, std::vector<Accumulator> &accs);
  std::pair<llvm::Value *, llvm::Value *> finalValue(const Accumulator &acc);
  void makeCarriedArrays();
  llvm::Value *carriedSlot(const Expr *expr, bool producer);
  void prefetchAhead(llvm::Value *address, int64_t bytes);

  const loop::Kernel &kernel_;
  const KernelSchedule &schedule_;
  const HostTarget &host_;
  const MathLibrary &math_;
  ReductionAlgebra algebra_;
  int64_t outerCount_;

  struct CarriedArray {
    const CarriedValue *value = nullptr;
    llvm::AllocaInst *scratch = nullptr;
  };
  std::unordered_map<const Expr *, CarriedArray> carried_;
  /// Rowwise kernels: by reduction, the stack arrays of its values, its
  /// float sum's block and its compensation, one element per vectorised
  /// point (made on first use).
  /// Booleans are kept a byte each (a vector of i1 in memory is packed).
  struct RowwiseArrays {
    llvm::Type *element = nullptr; // the accumulator's compute type
    llvm::AllocaInst *value = nullptr, *partial = nullptr,
                     *compensation = nullptr;
  };
  std::vector<RowwiseArrays> rowwise_;
  /// In a transposed tile: each transposed load's vector at the current row.
  std::unordered_map<const Expr *, llvm::Value *> transposedRows_;
  /// While the vectorised loop runs over one segment between the cuts:
  /// its variable and the segment's bounds [low, high).
  struct Segment {
    int64_t var = -1, low = 0, high = 0;
  } segment_;
  size_t currentLoop_ = 0;
  llvm::Value *loopPosition_ = nullptr; // the first lane's point in its loop

  llvm::Function *function_ = nullptr;
  llvm::BasicBlock *entry_ = nullptr;
  llvm::Value *beginArgument_ = nullptr;
  llvm::Value *endArgument_ = nullptr;
  std::unordered_map<int64_t, llvm::Value *> bufferPointers_;
  std::vector<int64_t> slots_; // the program buffer of each argument slot
  /// The values of the size symbols the kernel reads, loaded on entry from
  /// the array whose address is the slot of kSymbolSlot.
  std::unordered_map<int64_t, llvm::Value *> symbolValues_;
  void loadSymbols();
};

namespace {

// Whether a run of lanes a few elements apart loads as a span and a shuffle
// (elements of 4 or 8 bytes) rather than a gather.
bool stridedRunsLoad(llvm::Type *storage) {
  unsigned bits = storage->getPrimitiveSizeInBits();
  return bits == 32 || bits == 64;
}

} // namespace

llvm::Value *CpuKernelEmitter::bufferPointer(int64_t buffer) {
  auto found = bufferPointers_.find(buffer);
  if (found != bufferPointers_.end())
    return found->second;
  // Slots in order of first use, named by slot: kernels of the same shape
  // over different buffers have the same IR (and share cached code).
  int64_t slot = static_cast<int64_t>(slots_.size());
  slots_.push_back(buffer);
  llvm::IRBuilder<> entryBuilder(entry_, entry_->begin());
  llvm::Value *pointer = entryBuilder.CreateLoad(
      entryBuilder.getPtrTy(),
      entryBuilder.CreateConstGEP1_64(entryBuilder.getPtrTy(),
                                      function_->getArg(0), slot),
      "buffer" + std::to_string(slot));
  bufferPointers_[buffer] = pointer;
  return pointer;
}

llvm::Value *CpuKernelEmitter::loadElements(const Expr *expr, DType dtype,
                                            bool vector) {
  if (!vector)
    return ExprEmitter::loadElements(expr, dtype, vector);
  auto transposedRow = transposedRows_.find(expr);
  if (transposedRow != transposedRows_.end())
    return transposedRow->second;
  llvm::Type *storage = storageType(dtype);
  llvm::Value *base = bufferPointer(expr->id());
  std::optional<int64_t> coefficient =
      loop::affineCoefficient(expr->index(), vectorVar_);
  llvm::Type *vectorType = withLanes(storage, currentLanes_);
  // Runs of consecutive elements: the index moves by one (or minus one, or
  // one but for a clamp) from lane to lane.
  bool runs = !indexReadsVectorReduction(expr->index());
  if (runs && coefficient == 1) {
    llvm::Value *address =
        builder_.CreateGEP(storage, base, emit(expr->index(), false));
    if (schedule_.prefetchBytes > 0 && schedule_.prefetchLoop[currentLoop_])
      prefetchAhead(address, currentLanes_ * itemSize(dtype));
    return builder_.CreateAlignedLoad(vectorType, address, llvm::Align(1));
  }
  // A reversed run (a flip): the last lane's element is the lowest; one
  // contiguous load from there, its lanes reversed.
  if (runs && coefficient == -1) {
    llvm::Value *last = builder_.CreateSub(
        emit(expr->index(), false), builder_.getInt64(currentLanes_ - 1));
    llvm::Value *run = builder_.CreateAlignedLoad(
        vectorType, builder_.CreateGEP(storage, base, last), llvm::Align(1));
    std::vector<int> reversed;
    for (int lane = currentLanes_ - 1; lane >= 0; --lane)
      reversed.push_back(lane);
    return builder_.CreateShuffleVector(run, reversed);
  }
  // Masked loads are single instructions from AVX on (SSE would take them
  // lane by lane, as it takes a gather).
  if (runs && coefficient && *coefficient >= 2 && *coefficient <= 4 &&
      host_.vectorBits >= 256 && stridedRunsLoad(storage))
    return loadStridedRun(
        storage, builder_.CreateGEP(storage, base, emit(expr->index(), false)),
        *coefficient, nullptr);
  if (runs && !coefficient && host_.vectorBits >= 256)
    if (std::optional<EdgedRun> run = edgedRun(expr->index()))
      if (run->stride == 1 || stridedRunsLoad(storage))
        return loadEdgedRun(*run, storage, base, vectorType);
  llvm::Value *addresses =
      builder_.CreateGEP(storage, base, emit(expr->index(), true));
  return builder_.CreateMaskedGather(vectorType, addresses,
                                     llvm::Align(itemSize(dtype)));
}

// CpuSchedule's prefetchLoop: each 64-byte line of the `bytes` from
// `address`, schedule_.prefetchBytes further on, is fetched into every
// cache level for reading (prefetcht0 on x86). A prefetch never faults:
// past the buffer's end it is dropped.
void CpuKernelEmitter::prefetchAhead(llvm::Value *address, int64_t bytes) {
  constexpr int64_t kLineBytes = 64;
  for (int64_t offset = 0; offset < bytes; offset += kLineBytes)
    builder_.CreateIntrinsic(
        llvm::Intrinsic::prefetch, {builder_.getPtrTy()},
        {builder_.CreateGEP(
             builder_.getInt8Ty(), address,
             builder_.getInt64(schedule_.prefetchBytes + offset)),
         builder_.getInt32(0), builder_.getInt32(3), builder_.getInt32(1)});
}

namespace {

// t, low and high of min(max(t, low), high) or max(min(t, high), low) with
// integer constant bounds, low <= high; or of max(t, low) or min(t, high)
// alone, the other bound the int64 extreme.
bool clampOf(const Expr *node, const Expr *&t, int64_t &low, int64_t &high) {
  auto split = [](const Expr *e, BinaryOp op, const Expr *&other,
                  int64_t &bound) {
    if (e->kind() != ExprKind::Binary || e->binaryOp() != op ||
        e->dtype() != DType::Int64)
      return false;
    for (int side = 0; side < 2; ++side)
      if (e->operand(side)->isConstant()) {
        bound = e->operand(side)->integer();
        other = e->operand(1 - side);
        return true;
      }
    return false;
  };
  const Expr *inner;
  if (split(node, BinaryOp::Min, inner, high) &&
      split(inner, BinaryOp::Max, t, low))
    return low <= high;
  if (split(node, BinaryOp::Max, inner, low) &&
      split(inner, BinaryOp::Min, t, high))
    return low <= high;
  // One side only (a window that never passes the input's end).
  if (split(node, BinaryOp::Max, t, low)) {
    high = std::numeric_limits<int64_t>::max();
    return true;
  }
  if (split(node, BinaryOp::Min, t, high)) {
    low = std::numeric_limits<int64_t>::min();
    return true;
  }
  return false;
}

// t and the modulus of mod(t, modulus), a positive integer constant.
bool wrapOf(const Expr *node, const Expr *&t, int64_t &modulus) {
  if (node->kind() != ExprKind::Binary || node->binaryOp() != BinaryOp::Mod ||
      node->dtype() != DType::Int64 || !node->operand(1)->isConstant() ||
      node->operand(1)->integer() <= 0)
    return false;
  t = node->operand(0);
  modulus = node->operand(1)->integer();
  return true;
}

// k where `t` is Var(var) + k or Var(var) - (-k), k an integer constant.
bool offsetOfVar(const Expr *t, int64_t var, int64_t &offset) {
  if (t->kind() == ExprKind::Var && t->id() == var) {
    offset = 0;
    return true;
  }
  if (t->kind() != ExprKind::Binary)
    return false;
  if (t->binaryOp() == BinaryOp::Sub) {
    const Expr *v = t->operand(0), *k = t->operand(1);
    if (v->kind() != ExprKind::Var || v->id() != var || !k->isConstant() ||
        k->dtype() != DType::Int64)
      return false;
    offset = -k->integer();
    return true;
  }
  if (t->binaryOp() != BinaryOp::Add)
    return false;
  for (int side = 0; side < 2; ++side) {
    const Expr *v = t->operand(side), *k = t->operand(1 - side);
    if (v->kind() == ExprKind::Var && v->id() == var && k->isConstant() &&
        k->dtype() == DType::Int64) {
      offset = k->integer();
      return true;
    }
  }
  return false;
}

// For cmp(Var(var) + k, c): the point p where its truth changes and
// whether it holds below p (v < p) rather than from p on (v >= p).
bool comparisonCut(const Expr *node, int64_t var, int64_t &point, bool &below) {
  if (node->kind() != ExprKind::Binary || !node->operand(1)->isConstant() ||
      node->operand(1)->dtype() != DType::Int64)
    return false;
  int64_t offset;
  if (!offsetOfVar(node->operand(0), var, offset))
    return false;
  int64_t c = node->operand(1)->integer() - offset;
  switch (node->binaryOp()) {
  case BinaryOp::Lt:
    point = c, below = true;
    return true;
  case BinaryOp::Le:
    point = c + 1, below = true;
    return true;
  case BinaryOp::Ge:
    point = c, below = false;
    return true;
  case BinaryOp::Gt:
    point = c + 1, below = false;
    return true;
  default:
    return false;
  }
}

} // namespace

std::vector<int64_t> CpuKernelEmitter::segmentCuts(size_t level) {
  std::optional<int64_t> extent = kernel_.outerRanges[level]->constant();
  if (!extent || !schedule_.transposedLoads.empty())
    return {};
  std::vector<int64_t> cuts;
  loop::forEachExpr(kernel_, [&](const Expr *expr) {
    loop::anyNode(expr, [&](const Expr *node) {
      if (node->kind() != ExprKind::Where)
        return false;
      loop::anyNode(node->operand(0), [&](const Expr *test) {
        int64_t point;
        bool below;
        if (comparisonCut(test, static_cast<int64_t>(level), point, below) &&
            point > 0 && point < *extent &&
            std::find(cuts.begin(), cuts.end(), point) == cuts.end())
          cuts.push_back(point);
        return false;
      });
      return false;
    });
  });
  // Each segment's loops are emitted apart: a few cuts at most (cat of two
  // or three inputs, a pad's two edges).
  if (cuts.size() > 4)
    return {};
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

std::optional<bool> CpuKernelEmitter::knownComparison(const Expr *expr) {
  int64_t point;
  bool below;
  if (segment_.var < 0 || !comparisonCut(expr, segment_.var, point, below))
    return std::nullopt;
  if (segment_.high <= point)
    return below;
  if (segment_.low >= point)
    return !below;
  return std::nullopt;
}

std::optional<CpuKernelEmitter::EdgedRun>
CpuKernelEmitter::edgedRun(const Expr *index) {
  std::vector<const Expr *> terms{index};
  EdgedRun run;
  while (!terms.empty()) {
    const Expr *term = terms.back();
    terms.pop_back();
    if (!varying(term)) {
      run.shared.push_back(term);
      continue;
    }
    if (term->kind() == ExprKind::Binary && term->binaryOp() == BinaryOp::Add) {
      terms.push_back(term->operand(0));
      terms.push_back(term->operand(1));
      continue;
    }
    const Expr *position;
    if (run.position)
      return std::nullopt;
    if (wrapOf(term, position, run.modulus)) {
      if (run.modulus < currentLanes_)
        return std::nullopt;
      run.wrapped = term;
    } else if (!clampOf(term, position, run.low, run.high)) {
      return std::nullopt;
    }
    std::optional<int64_t> stride =
        loop::affineCoefficient(position, vectorVar_);
    if (!stride || *stride < 1 || *stride > 4 || (*stride > 1 && run.wrapped))
      return std::nullopt;
    run.stride = *stride;
    run.position = position;
  }
  if (!run.position)
    return std::nullopt;
  return run;
}

llvm::Value *CpuKernelEmitter::loadEdgedRun(const EdgedRun &run,
                                            llvm::Type *storage,
                                            llvm::Value *base,
                                            llvm::Type *vectorType) {
  llvm::Value *shared = builder_.getInt64(0);
  for (const Expr *term : run.shared)
    shared = builder_.CreateAdd(shared, emit(term, false));
  llvm::Value *row = builder_.CreateGEP(storage, base, shared);
  if (run.wrapped) {
    // The first lane's element is at mod(t, modulus) = r; lanes l with
    // r + l < modulus follow it, the others start again from 0 (at
    // r - modulus + l). Masked-off lanes are not read.
    llvm::Value *first = emit(run.wrapped, false);
    llvm::Value *beforeWrap = builder_.CreateICmpSLT(
        builder_.CreateAdd(splat(first, currentLanes_),
                           laneOffsets(currentLanes_)),
        splat(builder_.getInt64(run.modulus), currentLanes_));
    llvm::Value *head = builder_.CreateMaskedLoad(
        vectorType, builder_.CreateGEP(storage, row, first), llvm::Align(1),
        beforeWrap);
    llvm::Value *restart =
        builder_.CreateSub(first, builder_.getInt64(run.modulus));
    return builder_.CreateMaskedLoad(
        vectorType, builder_.CreateGEP(storage, row, restart), llvm::Align(1),
        builder_.CreateNot(beforeWrap), head);
  }
  // The first lane's unclamped position, and every lane's.
  llvm::Value *first = emit(run.position, false);
  // Within a segment whose positions all lie inside the bounds the clamp
  // does nothing: one contiguous load.
  int64_t offset;
  if (run.stride == 1 && segment_.var == vectorVar_ &&
      offsetOfVar(run.position, vectorVar_, offset) &&
      segment_.low + offset >= run.low &&
      segment_.high - 1 + offset <= run.high)
    return builder_.CreateAlignedLoad(
        vectorType, builder_.CreateGEP(storage, row, first), llvm::Align(1));
  llvm::Value *positions = emit(run.position, true);
  llvm::Value *below = builder_.CreateICmpSLT(
      positions, splat(builder_.getInt64(run.low), currentLanes_));
  llvm::Value *above = builder_.CreateICmpSGT(
      positions, splat(builder_.getInt64(run.high), currentLanes_));
  llvm::Value *inside = builder_.CreateNot(builder_.CreateOr(below, above));
  // The lanes outside read the edge element a clamped index gives: positions
  // rise along the lanes, so a lane below the run has the first lane's
  // element and one above it the last lane's, elements the kernel reads.
  auto elementOfLane = [&](int64_t lane) {
    llvm::Value *position =
        builder_.CreateAdd(first, builder_.getInt64(lane * run.stride));
    position = builder_.CreateBinaryIntrinsic(
        llvm::Intrinsic::smin,
        builder_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, position,
                                       builder_.getInt64(run.low)),
        builder_.getInt64(run.high));
    return splat(builder_.CreateLoad(
                     storage, builder_.CreateGEP(storage, row, position)),
                 currentLanes_);
  };
  llvm::Value *outside = builder_.CreateSelect(
      below, elementOfLane(0), elementOfLane(currentLanes_ - 1));
  // Masked-off lanes are not read: the run's address may lie outside the
  // buffer where they do.
  llvm::Value *start = builder_.CreateGEP(storage, row, first);
  if (run.stride > 1)
    return builder_.CreateSelect(
        inside, loadStridedRun(storage, start, run.stride, inside), outside);
  return builder_.CreateMaskedLoad(vectorType, start, llvm::Align(1), inside,
                                   outside);
}

llvm::Value *CpuKernelEmitter::loadStridedRun(llvm::Type *storage,
                                              llvm::Value *start,
                                              int64_t stride,
                                              llvm::Value *inside) {
  const int lanes = currentLanes_;
  const int span = static_cast<int>((lanes - 1) * stride + 1);
  // Element j of the span is read where it is a lane's (j % stride == 0)
  // and that lane is inside: the last lane's element is the span's last.
  llvm::Value *mask;
  if (inside) {
    std::vector<int> pick;
    for (int j = 0; j < span; ++j)
      pick.push_back(j % stride == 0 ? j / static_cast<int>(stride) : lanes);
    mask = builder_.CreateShuffleVector(
        inside,
        llvm::Constant::getNullValue(
            llvm::FixedVectorType::get(builder_.getInt1Ty(), lanes)),
        pick);
  } else {
    mask = llvm::Constant::getAllOnesValue(
        llvm::FixedVectorType::get(builder_.getInt1Ty(), span));
  }
  llvm::Value *wide = builder_.CreateMaskedLoad(
      llvm::FixedVectorType::get(storage, span), start, llvm::Align(1), mask);
  std::vector<int> lanesOfSpan;
  for (int lane = 0; lane < lanes; ++lane)
    lanesOfSpan.push_back(lane * static_cast<int>(stride));
  return builder_.CreateShuffleVector(wide, lanesOfSpan);
}

void CpuKernelEmitter::emitStores(const std::vector<loop::Store> &stores) {
  struct Pending {
    llvm::Value *index;
    llvm::Value *value;
    bool contiguous;
    DType dtype;
    int64_t buffer;
    bool streamed;
  };
  // Every value is computed before any store, so that the stores of one
  // point are one parallel assignment.
  std::vector<Pending> pending;
  bool vector = currentLanes_ > 1;
  for (const loop::Store &store : stores) {
    DType dtype = program_.buffers.at(store.buffer).dtype();
    Pending item{nullptr, nullptr, false, dtype, store.buffer, false};
    bool indexVaries = vector && varying(store.index);
    if (indexVaries) {
      std::optional<int64_t> coefficient =
          loop::affineCoefficient(store.index, vectorVar_);
      item.contiguous = coefficient && *coefficient == 1 &&
                        !indexReadsVectorReduction(store.index);
    }
    item.streamed = item.contiguous && &store == schedule_.streamedStore;
    item.index = emit(store.index, indexVaries && !item.contiguous);
    llvm::Value *value = emit(store.value, indexVaries);
    item.value = toStorage(dtype, emitCast(value, store.value->dtype(), dtype));
    if (!indexVaries && lanesOf(item.value) > 1) // one address: last lane wins
      item.value = builder_.CreateExtractElement(
          item.value, uint64_t(lanesOf(item.value) - 1));
    pending.push_back(item);
  }
  for (const Pending &item : pending) {
    llvm::Type *storage = storageType(item.dtype);
    llvm::Value *base = bufferPointer(item.buffer);
    if (lanesOf(item.index) > 1) {
      for (int lane = 0; lane < lanesOf(item.index); ++lane) {
        llvm::Value *address = builder_.CreateGEP(
            storage, base,
            builder_.CreateExtractElement(item.index, uint64_t(lane)));
        builder_.CreateAlignedStore(
            builder_.CreateExtractElement(item.value, uint64_t(lane)), address,
            llvm::Align(itemSize(item.dtype)));
      }
      continue;
    }
    llvm::Value *address = builder_.CreateGEP(storage, base, item.index);
    if (item.streamed) {
      llvm::StoreInst *stored = builder_.CreateAlignedStore(
          item.value, address, llvm::Align(schedule_.streamAlignment));
      stored->setMetadata(
          llvm::LLVMContext::MD_nontemporal,
          llvm::MDNode::get(
              context_, llvm::ConstantAsMetadata::get(builder_.getInt32(1))));
      continue;
    }
    builder_.CreateAlignedStore(
        item.value, address,
        item.contiguous ? llvm::Align(1) : llvm::Align(itemSize(item.dtype)));
  }
}

llvm::Value *CpuKernelEmitter::callMath(const char *name,
                                        std::vector<llvm::Value *> args) {
  int lanes = lanesOf(args[0]);
  llvm::Type *element = args[0]->getType()->getScalarType();
  bool isDouble = element->isDoubleTy();
  auto declare = [&](const MathFunction &function, llvm::Type *type) {
    std::vector<llvm::Type *> parameters(args.size(), type);
    llvm::FunctionCallee callee = module_.getOrInsertFunction(
        function.symbol, llvm::FunctionType::get(type, parameters, false));
    if (auto *declared = llvm::dyn_cast<llvm::Function>(callee.getCallee())) {
      declared->setDoesNotThrow();
      declared->setDoesNotAccessMemory();
    }
    return callee;
  };
  if (lanes > 1) {
    for (int chunk = lanes; chunk >= 2; chunk /= 2) {
      std::optional<MathFunction> function =
          math_.vector(name, isDouble, chunk);
      if (!function || lanes % chunk != 0)
        continue;
      llvm::FunctionCallee callee =
          declare(*function, withLanes(element, chunk));
      std::vector<llvm::Value *> pieces;
      for (int start = 0; start < lanes; start += chunk) {
        std::vector<llvm::Value *> chunkArgs;
        std::vector<int> mask;
        for (int lane = 0; lane < chunk; ++lane)
          mask.push_back(start + lane);
        for (llvm::Value *arg : args)
          chunkArgs.push_back(
              chunk == lanes ? arg : builder_.CreateShuffleVector(arg, mask));
        pieces.push_back(builder_.CreateCall(callee, chunkArgs));
      }
      while (pieces.size() > 1) {
        std::vector<llvm::Value *> joined;
        for (size_t index = 0; index < pieces.size(); index += 2) {
          std::vector<int> mask;
          for (int lane = 0; lane < 2 * lanesOf(pieces[index]); ++lane)
            mask.push_back(lane);
          joined.push_back(builder_.CreateShuffleVector(
              pieces[index], pieces[index + 1], mask));
        }
        pieces = joined;
      }
      return pieces[0];
    }
  }
  std::optional<MathFunction> scalar = math_.scalar(name, isDouble);
  if (!scalar)
    throw Unsupported(std::string("the CPU code generator has no ") + name);
  llvm::FunctionCallee callee = declare(*scalar, element);
  if (lanes == 1)
    return builder_.CreateCall(callee, args);
  llvm::Value *result = llvm::PoisonValue::get(args[0]->getType());
  for (int lane = 0; lane < lanes; ++lane) {
    std::vector<llvm::Value *> laneArgs;
    for (llvm::Value *arg : args)
      laneArgs.push_back(builder_.CreateExtractElement(arg, uint64_t(lane)));
    result = builder_.CreateInsertElement(
        result, builder_.CreateCall(callee, laneArgs), uint64_t(lane));
  }
  return result;
}

// The shared emitter's (float32 exp, tanh and erf inline: they vectorise
// with the code around them; the rest through SLEEF or the C library), and
// log1p from SLEEF's log (below).
llvm::Value *CpuKernelEmitter::emitMathFunction(UnaryOp op, llvm::Value *x) {
  if (op == UnaryOp::Log1p) {
    // log1p(x) = log(u) - ((u - 1) - x) / u with u = 1 + x: the quotient
    // puts back what rounding u lost (Goldberg), where u - 1 is exact. One
    // log and a division where SLEEF's log1p (which gives inf above about
    // 1e38 in float, 1e307 in double, so that a log was computed beside it
    // for those) took 2.5x the time. The correction is NaN only where u is
    // 0 (x = -1: -inf) or infinite (inf): there it is dropped. Zeros keep
    // their sign.
    llvm::Value *u = builder_.CreateFAdd(floatLike(x, 1.0), x);
    llvm::Value *correction = builder_.CreateFDiv(
        builder_.CreateFSub(builder_.CreateFSub(u, floatLike(u, 1.0)), x), u);
    correction =
        builder_.CreateSelect(builder_.CreateFCmpORD(correction, correction),
                              correction, floatLike(x, 0.0));
    llvm::Value *result = builder_.CreateFSub(callMath("log", {u}), correction);
    return builder_.CreateSelect(builder_.CreateFCmpOEQ(x, floatLike(x, 0.0)),
                                 x, result);
  }
  return ExprEmitter::emitMathFunction(op, x);
}

llvm::Value *CpuKernelEmitter::symbolValue(int64_t number) {
  auto found = symbolValues_.find(number);
  if (found == symbolValues_.end())
    throw Error("the CPU code generator: symbol s" + std::to_string(number) +
                " was not loaded on entry");
  return found->second;
}

void CpuKernelEmitter::loadSymbols() {
  std::vector<int64_t> numbers;
  auto note = [&](int64_t number) {
    if (std::find(numbers.begin(), numbers.end(), number) == numbers.end())
      numbers.push_back(number);
  };
  auto noteRanges = [&](const loop::Ranges &ranges) {
    for (SymSize range : ranges)
      for (int64_t number : size::symbolsOf(range))
        note(number);
  };
  noteRanges(kernel_.outerRanges);
  for (const loop::Loop &loop : kernel_.loops)
    noteRanges(loop.ranges);
  loop::forEachExpr(kernel_, [&](const Expr *expr) {
    loop::anyNode(expr, [&](const Expr *node) {
      if (node->kind() == loop::ExprKind::Symbol)
        note(node->id());
      return false;
    });
  });
  if (numbers.empty())
    return;
  std::sort(numbers.begin(), numbers.end());
  llvm::Value *array = bufferPointer(kSymbolSlot);
  for (int64_t number : numbers)
    symbolValues_[number] = builder_.CreateAlignedLoad(
        builder_.getInt64Ty(),
        builder_.CreateConstGEP1_64(builder_.getInt64Ty(), array, number),
        llvm::Align(8), "s" + std::to_string(number));
}

// ------------------------------------------------------ loops and reductions

void CpuKernelEmitter::emitOuter(size_t level) {
  if (level == kernel_.outerRanges.size()) {
    emitPoint();
    return;
  }
  // A transposing kernel's u (the loop before the last) counts tiles.
  bool tiles = !schedule_.transposedLoads.empty();
  if (level == 0 && schedule_.parallelDepth > 1) {
    countedLoop(beginArgument_, endArgument_, 1, [&](llvm::Value *flat) {
      for (size_t inner = schedule_.parallelDepth - 1; inner > 0; --inner) {
        llvm::Value *range =
            sizeValue(schedule_.parallelExtent(kernel_, inner));
        vars_[inner] = builder_.CreateURem(flat, range);
        flat = builder_.CreateUDiv(flat, range);
      }
      vars_[0] = flat;
      if (tiles)
        emitTransposedTiles(vars_[schedule_.parallelDepth - 1]);
      else
        emitOuter(schedule_.parallelDepth);
    });
    return;
  }
  llvm::Value *start = level == 0 ? beginArgument_ : builder_.getInt64(0);
  llvm::Value *end =
      level == 0 ? endArgument_ : sizeValue(kernel_.outerRanges[level]);
  if (tiles && level + 2 == kernel_.outerRanges.size()) {
    countedLoop(start, end, 1,
                [&](llvm::Value *tile) { emitTransposedTiles(tile); });
    return;
  }
  if (schedule_.strategy == VectorStrategy::Outer &&
      level + 1 == kernel_.outerRanges.size()) {
    emitVectorLoops(level, start, end);
    return;
  }
  countedLoop(start, end, 1, [&](llvm::Value *index) {
    vars_[level] = index;
    emitOuter(level + 1);
  });
}

// The points [start, end) of the last outer loop (the vectorised one), in
// vectors of each width, then one by one.
void CpuKernelEmitter::emitVectorLoops(size_t level, llvm::Value *start,
                                       llvm::Value *end) {
  // Where selects compare the loop's variable with constants (cat, pad),
  // the points between two cuts run a loop of their own in which each
  // comparison is known (knownComparison) and the clamps of the loads
  // beside them are dropped where they do nothing (loadEdgedRun).
  if (segment_.var < 0) {
    std::vector<int64_t> cuts = segmentCuts(level);
    if (!cuts.empty()) {
      cuts.insert(cuts.begin(), 0);
      cuts.push_back(*kernel_.outerRanges[level]->constant());
      for (size_t piece = 0; piece + 1 < cuts.size(); ++piece) {
        segment_ = {static_cast<int64_t>(level), cuts[piece], cuts[piece + 1]};
        llvm::Value *from = builder_.CreateBinaryIntrinsic(
            llvm::Intrinsic::smax, start, builder_.getInt64(cuts[piece]));
        // A chunk of the parallel range may miss the segment: [from, from).
        llvm::Value *to = builder_.CreateBinaryIntrinsic(
            llvm::Intrinsic::smax, from,
            builder_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, end,
                                           builder_.getInt64(cuts[piece + 1])));
        emitVectorLoops(level, from, to);
      }
      segment_ = Segment{};
      return;
    }
  }
  if (schedule_.rowwiseColumns > 0) {
    int64_t columns = schedule_.rowwiseColumns;
    countedLoop(start, end, columns, [&](llvm::Value *tileStart) {
      emitRowwise(level, tileStart,
                  builder_.CreateBinaryIntrinsic(
                      llvm::Intrinsic::smin,
                      builder_.CreateAdd(tileStart, builder_.getInt64(columns)),
                      end));
    });
    return;
  }
  llvm::Value *from =
      schedule_.streamedStore ? emitAlignmentPeel(level, start, end) : start;
  // Where the loop's length is known (not the parallel range's chunk, no
  // alignment peel), the points past the whole vectors take narrower ones
  // down to 4 lanes before the scalar tail: a row of 28 floats is 16, 8 and
  // 4 lanes, not 16 and 12 scalar points (a 3x3 average pool over NCHW
  // 8x64x28x28 on 2 threads of the 2-core EPYC: 1396 us with the scalar
  // tail, Inductor's 430).
  std::vector<int> widths = schedule_.vectorWidths();
  std::optional<int64_t> length;
  if (level > 0 && !schedule_.streamedStore) {
    if (segment_.var == static_cast<int64_t>(level))
      length = segment_.high - segment_.low;
    else
      length = kernel_.outerRanges[level]->constant();
  }
  if (length) {
    int64_t left = *length % schedule_.lanes;
    for (int width = schedule_.lanes / 2; width >= 4; width /= 2)
      if (left >= width) {
        widths.push_back(width);
        left -= width;
      }
  }
  sweep(level, from, end, widths, [&](llvm::Value *) { emitPoint(); });
}

void CpuKernelEmitter::sweep(size_t level, llvm::Value *start, llvm::Value *end,
                             const std::vector<int> &widths, LoopBody body) {
  llvm::Value *from = start;
  for (int width : widths) {
    llvm::Value *split = vectorEnd(builder_, from, end, width);
    countedLoop(from, split, width, [&](llvm::Value *index) {
      vars_[level] = index;
      enterVector(static_cast<int64_t>(level), width);
      body(index);
      leaveVector();
    });
    from = split;
  }
  countedLoop(from, end, 1, [&](llvm::Value *index) {
    vars_[level] = index;
    body(index);
  });
}

llvm::Value *CpuKernelEmitter::loadRowwise(const RowwiseArrays &arrays,
                                           llvm::AllocaInst *array,
                                           llvm::Value *offset) {
  llvm::Type *stored = array->getAllocatedType();
  llvm::Value *value = builder_.CreateAlignedLoad(
      withLanes(stored, currentLanes_),
      builder_.CreateGEP(stored, array, offset),
      llvm::Align(stored->getScalarSizeInBits() / 8));
  if (stored == arrays.element)
    return value;
  return builder_.CreateTrunc(value, withLanes(arrays.element, currentLanes_));
}

void CpuKernelEmitter::storeRowwise(const RowwiseArrays &arrays,
                                    llvm::AllocaInst *array,
                                    llvm::Value *offset, llvm::Value *value) {
  llvm::Type *stored = array->getAllocatedType();
  if (stored != arrays.element)
    value = builder_.CreateZExt(value, withLanes(stored, currentLanes_));
  builder_.CreateAlignedStore(value, builder_.CreateGEP(stored, array, offset),
                              llvm::Align(stored->getScalarSizeInBits() / 8));
}

void CpuKernelEmitter::loadRowwiseValues(size_t count, llvm::Value *offset) {
  for (size_t index = 0; index < count; ++index)
    reductionValues_[index] =
        loadRowwise(rowwise_[index], rowwise_[index].value, offset);
  varyingMemo_.clear();
}

// CpuSchedule's rowwiseColumns, over the columns [start, end) of one tile:
// for each loop with ranges, every reduction's array starts at its
// identity; each point of the loop (its innermost range in blocks where a
// float sum adds in blocks, as emitLoopNest's) sweeps the vectorised points
// [start, end), adding each point's value to its array element; the arrays
// then hold the final values (compensated, rounded) that later loops read.
// A loop without ranges sweeps the points once and stores. Each element
// sees the same operations in the same order as the vectorised point of
// emitLoopNest would.
void CpuKernelEmitter::emitRowwise(size_t level, llvm::Value *start,
                                   llvm::Value *end) {
  if (rowwise_.empty()) {
    llvm::IRBuilder<> entryBuilder(entry_, entry_->begin());
    auto array = [&](llvm::Type *element) {
      llvm::AllocaInst *made = entryBuilder.CreateAlloca(
          element, entryBuilder.getInt64(schedule_.rowwiseColumns), "rowwise");
      made->setAlignment(llvm::Align(64));
      return made;
    };
    for (const loop::Loop &loop : kernel_.loops)
      for (const loop::Reduction &reduction : loop.reductions) {
        RowwiseArrays arrays;
        arrays.element = computeType(accumulatorDType(reduction));
        llvm::Type *stored = arrays.element->isIntegerTy(1)
                                 ? entryBuilder.getInt8Ty()
                                 : arrays.element;
        arrays.value = array(stored);
        if (isFloatSum(reduction)) {
          arrays.partial = array(stored);
          arrays.compensation = array(stored);
        }
        rowwise_.push_back(arrays);
      }
  }
  reductionValues_.assign(static_cast<size_t>(kernel_.reductionCount()),
                          nullptr);
  varyingMemo_.clear();
  // The tile's columns; `body` gets each first one's offset in the arrays.
  auto sweepTile = [&](auto body) {
    sweep(level, start, end, schedule_.vectorWidths(),
          [&](llvm::Value *index) { body(builder_.CreateSub(index, start)); });
  };
  size_t base = 0;
  for (size_t loopIndex = 0; loopIndex < kernel_.loops.size(); ++loopIndex) {
    const loop::Loop &loop = kernel_.loops[loopIndex];
    currentLoop_ = loopIndex;
    if (loop.ranges.empty()) {
      sweepTile([&](llvm::Value *offset) {
        loadRowwiseValues(base, offset);
        emitLoopNest(loopIndex, base);
      });
      continue;
    }
    // Runs `visit(reduction, accumulator dtype, arrays, offset)` for each
    // reduction of the loop at every point of the sweep, where the earlier
    // loops' reductions have their values.
    auto sweepReductions = [&](auto visit) {
      sweepTile([&](llvm::Value *offset) {
        loadRowwiseValues(base, offset);
        for (size_t index = 0; index < loop.reductions.size(); ++index) {
          const loop::Reduction &reduction = loop.reductions[index];
          visit(reduction, accumulatorDType(reduction), rowwise_[base + index],
                offset);
        }
      });
    };
    auto zero = [&](const RowwiseArrays &arrays) {
      return llvm::Constant::getNullValue(
          withLanes(arrays.element, currentLanes_));
    };
    sweepReductions([&](const loop::Reduction &reduction, DType dtype,
                        const RowwiseArrays &arrays, llvm::Value *offset) {
      storeRowwise(arrays, arrays.value, offset,
                   algebra_.identity(reduction.op, dtype, currentLanes_));
      if (arrays.compensation)
        storeRowwise(arrays, arrays.compensation, offset, zero(arrays));
    });
    bool blocked = false;
    for (const loop::Reduction &reduction : loop.reductions)
      blocked = blocked || isFloatSum(reduction);
    int64_t firstVar = outerCount_;
    int64_t lastVar =
        outerCount_ + static_cast<int64_t>(loop.ranges.size()) - 1;
    llvm::Value *innermost = sizeValue(loop.ranges.back());
    auto accumulatePoints = [&](llvm::Value *from, llvm::Value *to) {
      countedLoop(from, to, 1, [&](llvm::Value *index) {
        vars_[lastVar] = index;
        sweepReductions([&](const loop::Reduction &reduction, DType dtype,
                            const RowwiseArrays &arrays, llvm::Value *offset) {
          llvm::Value *value =
              splat(emitCast(emit(reduction.value, currentLanes_ > 1),
                             reduction.value->dtype(), dtype),
                    currentLanes_);
          llvm::AllocaInst *target =
              arrays.partial ? arrays.partial : arrays.value;
          storeRowwise(arrays, target, offset,
                       algebra_.combine(reduction.op, dtype,
                                        loadRowwise(arrays, target, offset),
                                        value));
        });
      });
    };
    std::vector<llvm::Value *> extents;
    for (size_t dimension = 0; dimension + 1 < loop.ranges.size(); ++dimension)
      extents.push_back(sizeValue(loop.ranges[dimension]));
    auto scopedLoop = [&](llvm::Value *from, llvm::Value *to, int64_t step,
                          LoopBody body) { countedLoop(from, to, step, body); };
    backend::emitLoopNest(
        builder_, extents, builder_.getInt64(0), scopedLoop,
        [&](llvm::ArrayRef<llvm::Value *> indices, llvm::Value *) {
          for (size_t dimension = 0; dimension < indices.size(); ++dimension)
            vars_[firstVar + dimension] = indices[dimension];
          if (!blocked) {
            accumulatePoints(builder_.getInt64(0), innermost);
            return;
          }
          countedLoop(
              builder_.getInt64(0), innermost, kSumBlockPerLane,
              [&](llvm::Value *blockStart) {
                sweepReductions([&](const loop::Reduction &, DType,
                                    const RowwiseArrays &arrays,
                                    llvm::Value *offset) {
                  if (arrays.partial)
                    storeRowwise(arrays, arrays.partial, offset, zero(arrays));
                });
                accumulatePoints(
                    blockStart,
                    builder_.CreateBinaryIntrinsic(
                        llvm::Intrinsic::smin,
                        builder_.CreateAdd(blockStart,
                                           builder_.getInt64(kSumBlockPerLane)),
                        innermost));
                // Kahan summation of the block sums, as foldPartials.
                sweepReductions([&](const loop::Reduction &, DType,
                                    const RowwiseArrays &arrays,
                                    llvm::Value *offset) {
                  if (!arrays.partial)
                    return;
                  auto [sum, error] = algebra_.compensatedAdd(
                      loadRowwise(arrays, arrays.value, offset),
                      loadRowwise(arrays, arrays.compensation, offset),
                      loadRowwise(arrays, arrays.partial, offset));
                  storeRowwise(arrays, arrays.compensation, offset, error);
                  storeRowwise(arrays, arrays.value, offset, sum);
                });
              });
        });
    for (int64_t var = firstVar; var <= lastVar; ++var)
      vars_[var] = nullptr;
    // The final values: compensated, rounded to the accumulator's type.
    sweepReductions([&](const loop::Reduction &, DType dtype,
                        const RowwiseArrays &arrays, llvm::Value *offset) {
      llvm::Value *value = loadRowwise(arrays, arrays.value, offset);
      if (arrays.compensation)
        value = builder_.CreateFSub(
            value, loadRowwise(arrays, arrays.compensation, offset));
      storeRowwise(arrays, arrays.value, offset, roundTo(dtype, value));
    });
    base += loop.reductions.size();
  }
  varyingMemo_.clear();
}

namespace {

// The columns of a square matrix given as its rows (vectors of as many
// lanes as there are rows, a power of two): log2(n) rounds, each pairing
// row k with row k + n/2 and interleaving their low halves into row 2k
// and their high halves into row 2k + 1.
std::vector<llvm::Value *> transposed(llvm::IRBuilderBase &builder,
                                      std::vector<llvm::Value *> rows) {
  size_t n = rows.size();
  std::vector<int> low, high;
  for (int lane = 0; lane < static_cast<int>(n / 2); ++lane) {
    low.insert(low.end(), {lane, lane + static_cast<int>(n)});
    high.insert(high.end(), {lane + static_cast<int>(n / 2),
                             lane + static_cast<int>(n + n / 2)});
  }
  for (size_t round = 1; round < n; round *= 2) {
    std::vector<llvm::Value *> next(n);
    for (size_t k = 0; k < n / 2; ++k) {
      next[2 * k] = builder.CreateShuffleVector(rows[k], rows[k + n / 2], low);
      next[2 * k + 1] =
          builder.CreateShuffleVector(rows[k], rows[k + n / 2], high);
    }
    rows = std::move(next);
  }
  return rows;
}

} // namespace

// Tile `tile` of u (CpuSchedule's planTranspose): where it has all its
// lanes rows, lanes x lanes tiles along v, then the points of v past the
// last whole tile row by row; a last tile of fewer rows row by row.
void CpuKernelEmitter::emitTransposedTiles(llvm::Value *tile) {
  size_t u = kernel_.outerRanges.size() - 2, v = u + 1;
  int lanes = schedule_.lanes;
  int64_t uRange = *kernel_.outerRanges[u]->constant();
  int64_t vRange = *kernel_.outerRanges[v]->constant();
  int64_t vTiled = vRange - vRange % lanes;
  llvm::Value *uStart = builder_.CreateMul(tile, builder_.getInt64(lanes));
  llvm::Value *uEnd = builder_.CreateBinaryIntrinsic(
      llvm::Intrinsic::smin,
      builder_.CreateAdd(uStart, builder_.getInt64(lanes)),
      builder_.getInt64(uRange));
  auto rowByRow = [&](llvm::Value *vStart) {
    countedLoop(uStart, uEnd, 1, [&](llvm::Value *row) {
      vars_[u] = row;
      emitVectorLoops(v, vStart, builder_.getInt64(vRange));
    });
  };
  auto wholeTile = [&] {
    scopes_.emplace_back();
    countedLoop(
        builder_.getInt64(0), builder_.getInt64(vTiled), lanes,
        [&](llvm::Value *vStart) { emitTransposedTile(uStart, vStart); });
    if (vTiled < vRange)
      rowByRow(builder_.getInt64(vTiled));
    scopes_.pop_back();
  };
  if (uRange % lanes == 0) {
    wholeTile();
    return;
  }
  llvm::Value *whole = builder_.CreateICmpEQ(builder_.CreateSub(uEnd, uStart),
                                             builder_.getInt64(lanes));
  auto *wholeBlock = llvm::BasicBlock::Create(context_, "tiles", function_);
  auto *partBlock = llvm::BasicBlock::Create(context_, "rows", function_);
  auto *done = llvm::BasicBlock::Create(context_, "tiled", function_);
  builder_.CreateCondBr(whole, wholeBlock, partBlock);
  builder_.SetInsertPoint(wholeBlock);
  wholeTile();
  builder_.CreateBr(done);
  builder_.SetInsertPoint(partBlock);
  scopes_.emplace_back();
  rowByRow(builder_.getInt64(0));
  scopes_.pop_back();
  builder_.CreateBr(done);
  builder_.SetInsertPoint(done);
}

// One lanes x lanes tile at (uStart, vStart): each transposed load's rows
// (one contiguous vector along u per v), transposed into its vectors along
// v, then the tile's points row by row, a vector along v each.
void CpuKernelEmitter::emitTransposedTile(llvm::Value *uStart,
                                          llvm::Value *vStart) {
  size_t u = kernel_.outerRanges.size() - 2, v = u + 1;
  int lanes = schedule_.lanes;
  std::vector<std::vector<llvm::Value *>> columns;
  for (const Expr *load : schedule_.transposedLoads) {
    DType dtype = program_.buffers.at(load->id()).dtype();
    llvm::Type *storage = storageType(dtype);
    std::vector<llvm::Value *> rows;
    for (int lane = 0; lane < lanes; ++lane) {
      scopes_.emplace_back();
      vars_[u] = uStart;
      vars_[v] = builder_.CreateAdd(vStart, builder_.getInt64(lane));
      llvm::Value *address = builder_.CreateGEP(
          storage, bufferPointer(load->id()), emit(load->index(), false));
      scopes_.pop_back();
      rows.push_back(builder_.CreateAlignedLoad(
          withLanes(storage, lanes), address, llvm::Align(itemSize(dtype))));
    }
    columns.push_back(transposed(builder_, std::move(rows)));
  }
  for (int row = 0; row < lanes; ++row) {
    scopes_.emplace_back();
    vars_[u] = builder_.CreateAdd(uStart, builder_.getInt64(row));
    vars_[v] = vStart;
    for (size_t index = 0; index < columns.size(); ++index)
      transposedRows_[schedule_.transposedLoads[index]] = columns[index][row];
    enterVector(static_cast<int64_t>(v), lanes);
    emitPoint();
    leaveVector();
    scopes_.pop_back();
  }
  transposedRows_.clear();
}

// Scalar points from `start` until the streamed store's address is a
// multiple of the vector's bytes, so that the vector loops after it store
// aligned (all of [start, end) where the address is not a multiple of the
// element's size). Returns where the vector loops start.
llvm::Value *CpuKernelEmitter::emitAlignmentPeel(size_t level,
                                                 llvm::Value *start,
                                                 llvm::Value *end) {
  llvm::Value *aligned = alignedStart(level, start, end);
  countedLoop(start, aligned, 1, [&](llvm::Value *position) {
    vars_[level] = position;
    emitPoint();
  });
  return aligned;
}

// The first index in [start, end) of variable `var` at which the streamed
// store's address is a multiple of the vector's bytes (`end` where the
// address is not a multiple of the element's size).
llvm::Value *CpuKernelEmitter::alignedStart(size_t var, llvm::Value *start,
                                            llvm::Value *end) {
  DType dtype = program_.buffers.at(schedule_.streamedStore->buffer).dtype();
  int64_t size = itemSize(dtype);
  scopes_.emplace_back();
  llvm::Value *saved = vars_[var];
  vars_[var] = start;
  llvm::Value *index = emit(schedule_.streamedStore->index, false);
  vars_[var] = saved;
  scopes_.pop_back();
  llvm::Value *address = builder_.CreatePtrToInt(
      builder_.CreateGEP(storageType(dtype),
                         bufferPointer(schedule_.streamedStore->buffer), index),
      builder_.getInt64Ty());
  llvm::Value *toBoundary =
      builder_.CreateAnd(builder_.CreateNeg(address),
                         builder_.getInt64(schedule_.streamAlignment - 1));
  llvm::Value *count = builder_.CreateSub(end, start);
  llvm::Value *peel = builder_.CreateSelect(
      builder_.CreateICmpEQ(
          builder_.CreateAnd(address, builder_.getInt64(size - 1)),
          builder_.getInt64(0)),
      builder_.CreateUDiv(toBoundary, builder_.getInt64(size)), count);
  peel = builder_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, peel, count);
  return builder_.CreateAdd(start, peel);
}

void CpuKernelEmitter::emitPoint() {
  reductionValues_.assign(static_cast<size_t>(kernel_.reductionCount()),
                          nullptr);
  varyingMemo_.clear();
  size_t reductionBase = 0;
  for (size_t loopIndex = 0; loopIndex < kernel_.loops.size(); ++loopIndex) {
    emitLoopNest(loopIndex, reductionBase);
    reductionBase += kernel_.loops[loopIndex].reductions.size();
  }
}

std::vector<Accumulator>
CpuKernelEmitter::makeAccumulators(const loop::Loop &loop, int lanes,
                                   bool blocks) {
  llvm::IRBuilder<> entryBuilder(entry_, entry_->begin());
  std::vector<Accumulator> accumulators;
  for (const loop::Reduction &reduction : loop.reductions) {
    DType dtype = accumulatorDType(reduction);
    llvm::Type *type = withLanes(computeType(dtype), lanes);
    Accumulator acc;
    acc.lanes = lanes;
    acc.value = entryBuilder.CreateAlloca(type);
    builder_.CreateStore(algebra_.identity(reduction.op, dtype, lanes),
                         acc.value);
    if (reduction.op == ReduceOp::ArgMax || reduction.op == ReduceOp::ArgMin) {
      llvm::Type *indexType = withLanes(builder_.getInt64Ty(), lanes);
      acc.index = entryBuilder.CreateAlloca(indexType);
      builder_.CreateStore(llvm::ConstantInt::get(
                               indexType, std::numeric_limits<int64_t>::max()),
                           acc.index);
    }
    if (blocks && isFloatSum(reduction)) {
      acc.partial = entryBuilder.CreateAlloca(type);
      acc.compensation = entryBuilder.CreateAlloca(type);
      builder_.CreateStore(llvm::Constant::getNullValue(type),
                           acc.compensation);
      builder_.CreateStore(llvm::Constant::getNullValue(type), acc.partial);
    }
    accumulators.push_back(acc);
  }
  return accumulators;
}

void CpuKernelEmitter::accumulate(const loop::Loop &loop,
                                  std::vector<Accumulator> &accs,
                                  llvm::Value *position) {
  bool vector = currentLanes_ > 1;
  for (size_t index = 0; index < loop.reductions.size(); ++index) {
    const loop::Reduction &reduction = loop.reductions[index];
    Accumulator &acc = accs[index];
    DType dtype = accumulatorDType(reduction);
    llvm::Value *value = splat(emitCast(emit(reduction.value, vector),
                                        reduction.value->dtype(), dtype),
                               acc.lanes);
    llvm::Type *type = acc.value->getAllocatedType();
    if (acc.index) {
      llvm::Type *indexType = acc.index->getAllocatedType();
      auto [bestValue, bestIndex] = algebra_.combineArg(
          reduction.op, dtype, builder_.CreateLoad(type, acc.value),
          builder_.CreateLoad(indexType, acc.index), value,
          splat(position, acc.lanes));
      builder_.CreateStore(bestValue, acc.value);
      builder_.CreateStore(bestIndex, acc.index);
      continue;
    }
    llvm::AllocaInst *target = acc.partial ? acc.partial : acc.value;
    builder_.CreateStore(algebra_.combine(reduction.op, dtype,
                                          builder_.CreateLoad(type, target),
                                          value),
                         target);
  }
}

void CpuKernelEmitter::resetPartials(const loop::Loop &loop,
                                     std::vector<Accumulator> &accs) {
  for (size_t index = 0; index < loop.reductions.size(); ++index)
    if (accs[index].partial)
      builder_.CreateStore(
          llvm::Constant::getNullValue(accs[index].partial->getAllocatedType()),
          accs[index].partial);
}

void CpuKernelEmitter::foldPartials(const loop::Loop &loop,
                                    std::vector<Accumulator> &accs) {
  // Kahan summation of the block sums keeps long sums accurate.
  for (size_t index = 0; index < loop.reductions.size(); ++index) {
    Accumulator &acc = accs[index];
    if (!acc.partial)
      continue;
    llvm::Type *type = acc.value->getAllocatedType();
    llvm::Value *total = builder_.CreateLoad(type, acc.value);
    // (The compensation loads first, as it always has: the same IR.)
    llvm::Value *compensation = builder_.CreateLoad(type, acc.compensation);
    llvm::Value *partial = builder_.CreateLoad(type, acc.partial);
    auto [sum, error] = algebra_.compensatedAdd(total, compensation, partial);
    builder_.CreateStore(error, acc.compensation);
    builder_.CreateStore(sum, acc.value);
  }
}

std::pair<llvm::Value *, llvm::Value *>
CpuKernelEmitter::finalValue(const Accumulator &acc) {
  llvm::Value *value =
      builder_.CreateLoad(acc.value->getAllocatedType(), acc.value);
  if (acc.compensation)
    value = builder_.CreateFSub(
        value, builder_.CreateLoad(acc.compensation->getAllocatedType(),
                                   acc.compensation));
  llvm::Value *index =
      acc.index ? builder_.CreateLoad(acc.index->getAllocatedType(), acc.index)
                : nullptr;
  return {value, index};
}

void CpuKernelEmitter::emitLoopNest(size_t loopIndex, size_t reductionBase) {
  const loop::Loop &loop = kernel_.loops[loopIndex];
  currentLoop_ = loopIndex;
  size_t depth = loop.ranges.size();
  if (depth == 0) {
    scopes_.emplace_back();
    bool vector = currentLanes_ > 1;
    for (size_t index = 0; index < loop.reductions.size(); ++index) {
      const loop::Reduction &reduction = loop.reductions[index];
      llvm::Value *value;
      if (reduction.op == ReduceOp::ArgMax ||
          reduction.op == ReduceOp::ArgMin) {
        value = splat(builder_.getInt64(0), currentLanes_);
      } else {
        DType dtype = accumulatorDType(reduction);
        value = algebra_.ofOneElement(reduction.op, dtype,
                                      emitCast(emit(reduction.value, vector),
                                               reduction.value->dtype(), dtype),
                                      currentLanes_);
      }
      reductionValues_[reductionBase + index] = value;
    }
    emitStores(loop.stores);
    scopes_.pop_back();
    varyingMemo_.clear();
    return;
  }
  bool innerVector = schedule_.strategy == VectorStrategy::Inner &&
                     currentLanes_ == 1 && schedule_.innerVectorLoop[loopIndex];
  // A small window of constant extents over the output points that the
  // outer strategy vectorises (a pool's or a convolution's taps) is emitted
  // tap after tap, not as loops: each tap's lane masks and offsets are then
  // constants, and its sums of at most kMaxUnrolledPoints elements need no
  // blocks (a 3x3 average pool over NCHW 8x64x28x28 on 2 threads of the
  // 2-core EPYC: 501 -> 95 us, Inductor's 460; its max pool 479 -> 234).
  // Only where the kernel's body is short (the schedule unrolls it): a long
  // one copied per tap would cost more compile time than it saves.
  std::optional<int64_t> points = constantPoints(loop.ranges);
  bool unrolled = schedule_.strategy == VectorStrategy::Outer &&
                  schedule_.unroll > 1 && !innerVector && points &&
                  *points <= kMaxUnrolledPoints;
  std::vector<Accumulator> pointAccs =
      makeAccumulators(loop, currentLanes_, !unrolled);
  bool blocked = false;
  for (const loop::Reduction &reduction : loop.reductions)
    blocked = blocked || (!unrolled && isFloatSum(reduction));
  auto loopOf = [&](llvm::Value *start, llvm::Value *end, int64_t step,
                    LoopBody body) {
    if (!unrolled) {
      countedLoop(start, end, step, body);
      return;
    }
    int64_t first = llvm::cast<llvm::ConstantInt>(start)->getSExtValue();
    int64_t last = llvm::cast<llvm::ConstantInt>(end)->getSExtValue();
    for (int64_t index = first; index < last; index += step) {
      scopes_.emplace_back();
      body(builder_.getInt64(index));
      scopes_.pop_back();
    }
  };
  int64_t firstVar = outerCount_;
  int64_t lastVar = outerCount_ + static_cast<int64_t>(depth) - 1;
  SymSize innermostRange = loop.ranges.back();
  // A range that varies between calls is not known here: every width and
  // the scalar tail are emitted.
  std::optional<int64_t> innermostConstant = innermostRange->constant();
  int64_t block =
      kSumBlockPerLane * (innerVector ? schedule_.lanes * schedule_.unroll : 1);
  // Where every span is the whole innermost range, only the vector widths
  // and the scalar tail that some point of it takes are emitted (a range of
  // 64 is two wide steps and nothing else).
  bool streaming = innerVector && schedule_.streamedStore &&
                   schedule_.streamedLoop == loopIndex;
  bool wholeSpans = innermostConstant &&
                    (!blocked || *innermostConstant <= block) && !streaming;
  int64_t leftOver = innermostConstant.value_or(0);
  // One set of accumulators per vector width, widest first.
  std::vector<int> widths;
  if (innerVector) {
    for (int width : schedule_.vectorWidths()) {
      if (wholeSpans && leftOver < width)
        continue;
      widths.push_back(width);
      leftOver %= width;
    }
    // A reduction over a range that varies keeps one set of vector
    // accumulators (the widest) and a scalar tail: a set per width would
    // keep more accumulators live than there are registers.
    if (!innermostConstant && !loop.reductions.empty() && widths.size() > 1)
      widths.resize(1);
  }
  bool scalarTail = !wholeSpans || leftOver > 0;
  std::vector<std::vector<Accumulator>> vectorAccs;
  for (int width : widths)
    vectorAccs.push_back(makeAccumulators(loop, width));

  auto point = [&](std::vector<Accumulator> &accs, llvm::Value *first,
                   llvm::Value *position) {
    currentLoop_ = loopIndex;
    loopPosition_ = first;
    accumulate(loop, accs, position);
    emitStores(loop.stores);
    loopPosition_ = nullptr;
  };
  auto span = [&](llvm::Value *start, llvm::Value *end,
                  llvm::Value *outerPosition) {
    auto position = [&](llvm::Value *index) {
      return builder_.CreateAdd(
          builder_.CreateMul(outerPosition, sizeValue(innermostRange)), index);
    };
    auto scalarPoints = [&](llvm::Value *from, llvm::Value *to) {
      loopOf(from, to, 1, [&](llvm::Value *index) {
        vars_[lastVar] = index;
        llvm::Value *first = position(index);
        point(pointAccs, first, first);
      });
    };
    llvm::Value *split = start;
    if (streaming) { // scalar points until the stores are aligned
      split = alignedStart(static_cast<size_t>(lastVar), start, end);
      scalarPoints(start, split);
    }
    for (size_t widthIndex = 0; widthIndex < widths.size(); ++widthIndex) {
      int width = widths[widthIndex];
      llvm::Value *from = split;
      split = vectorEnd(builder_, from, end, width);
      countedLoop(from, split, width, [&](llvm::Value *index) {
        vars_[lastVar] = index;
        enterVector(lastVar, width);
        llvm::Value *first = position(index);
        point(vectorAccs[widthIndex], first,
              builder_.CreateAdd(splat(first, width), laneOffsets(width)));
        leaveVector();
      });
    }
    if (scalarTail)
      scalarPoints(split, end);
  };
  std::vector<llvm::Value *> extents;
  for (size_t dimension = 0; dimension + 1 < depth; ++dimension)
    extents.push_back(sizeValue(loop.ranges[dimension]));
  auto scopedLoop = [&](llvm::Value *start, llvm::Value *end, int64_t step,
                        LoopBody body) { loopOf(start, end, step, body); };
  backend::emitLoopNest(
      builder_, extents, builder_.getInt64(0), scopedLoop,
      [&](llvm::ArrayRef<llvm::Value *> indices, llvm::Value *outerPosition) {
        for (size_t dimension = 0; dimension < indices.size(); ++dimension)
          vars_[firstVar + dimension] = indices[dimension];
        if (!blocked) {
          span(builder_.getInt64(0), sizeValue(innermostRange), outerPosition);
          return;
        }
        countedLoop(
            builder_.getInt64(0), sizeValue(innermostRange), block,
            [&](llvm::Value *blockStart) {
              resetPartials(loop, pointAccs);
              for (std::vector<Accumulator> &accs : vectorAccs)
                resetPartials(loop, accs);
              llvm::Value *blockEnd = builder_.CreateBinaryIntrinsic(
                  llvm::Intrinsic::smin,
                  builder_.CreateAdd(blockStart, builder_.getInt64(block)),
                  sizeValue(innermostRange));
              span(blockStart, blockEnd, outerPosition);
              foldPartials(loop, pointAccs);
              for (std::vector<Accumulator> &accs : vectorAccs)
                foldPartials(loop, accs);
            });
      });
  for (int64_t var = firstVar; var <= lastVar; ++var)
    vars_[var] = nullptr;

  for (size_t index = 0; index < loop.reductions.size(); ++index) {
    const loop::Reduction &reduction = loop.reductions[index];
    DType dtype = accumulatorDType(reduction);
    bool isArg =
        reduction.op == ReduceOp::ArgMax || reduction.op == ReduceOp::ArgMin;
    auto [value, position] = finalValue(pointAccs[index]);
    // Fold each vector width's accumulator into the next narrower one, then
    // the lanes into one, then into the scalar tail's.
    llvm::Value *lanesValue = nullptr, *lanesPosition = nullptr;
    for (std::vector<Accumulator> &accs : vectorAccs) {
      auto [widthValue, widthPosition] = finalValue(accs[index]);
      if (lanesValue) {
        std::tie(lanesValue, lanesPosition) =
            algebra_.narrowLanes(reduction.op, dtype, lanesValue, lanesPosition,
                                 lanesOf(widthValue));
        if (isArg)
          std::tie(lanesValue, lanesPosition) =
              algebra_.combineArg(reduction.op, dtype, lanesValue,
                                  lanesPosition, widthValue, widthPosition);
        else
          lanesValue =
              algebra_.combine(reduction.op, dtype, lanesValue, widthValue);
      } else {
        lanesValue = widthValue;
        lanesPosition = widthPosition;
      }
    }
    if (lanesValue) {
      std::tie(lanesValue, lanesPosition) = algebra_.narrowLanes(
          reduction.op, dtype, lanesValue, lanesPosition, 1);
      llvm::Value *laneValue =
          builder_.CreateExtractElement(lanesValue, uint64_t(0));
      if (isArg)
        std::tie(value, position) = algebra_.combineArg(
            reduction.op, dtype, value, position, laneValue,
            builder_.CreateExtractElement(lanesPosition, uint64_t(0)));
      else
        value = algebra_.combine(reduction.op, dtype, value, laneValue);
    }
    if (isArg) {
      // No point at all (an empty range) gives 0.
      llvm::Value *none = builder_.CreateICmpEQ(
          position, integerLike(position, std::numeric_limits<int64_t>::max()));
      value = builder_.CreateSelect(none, integerLike(position, 0), position);
    } else {
      value = roundTo(dtype, value);
    }
    reductionValues_[reductionBase + index] = value;
  }
  varyingMemo_.clear();
}

// The carried value's slot at the current point of a consumer (load) or of
// its producer (store); nullptr elsewhere.
llvm::Value *CpuKernelEmitter::carriedSlot(const Expr *expr, bool producer) {
  auto found = carried_.find(expr);
  if (found == carried_.end() || !loopPosition_)
    return nullptr;
  const CarriedValue &carried = *found->second.value;
  bool here =
      producer ? carried.producer == currentLoop_
               : std::find(carried.consumers.begin(), carried.consumers.end(),
                           currentLoop_) != carried.consumers.end();
  if (!here)
    return nullptr;
  llvm::AllocaInst *scratch = found->second.scratch;
  return builder_.CreateGEP(scratch->getAllocatedType(), scratch,
                            loopPosition_);
}

llvm::Value *CpuKernelEmitter::reuse(const Expr *expr, bool vector) {
  llvm::Value *address = carriedSlot(expr, false);
  if (!address)
    return nullptr;
  llvm::Type *element = computeType(expr->dtype());
  return builder_.CreateAlignedLoad(
      withLanes(element, vector ? currentLanes_ : 1), address,
      llvm::Align(element->getScalarSizeInBits() / 8));
}

void CpuKernelEmitter::computed(const Expr *expr, llvm::Value *value) {
  if (llvm::Value *address = carriedSlot(expr, true))
    builder_.CreateAlignedStore(
        value, address,
        llvm::Align(value->getType()->getScalarSizeInBits() / 8));
}

// The stack arrays of the carried values, in the schedule's order.
void CpuKernelEmitter::makeCarriedArrays() {
  llvm::IRBuilder<> entryBuilder(entry_, entry_->begin());
  for (const CarriedValue &value : schedule_.carried) {
    // Over ranges that vary, the array holds the most points the schedule
    // carries; the function checks each call's points (emitFunction).
    const loop::Ranges &ranges = kernel_.loops[value.producer].ranges;
    int64_t points =
        ranges.isStatic() ? numelOf(ranges.constants()) : kMaxCarried;
    llvm::AllocaInst *scratch = entryBuilder.CreateAlloca(
        computeType(value.expr->dtype()), sizeValue(points), "carried");
    scratch->setAlignment(llvm::Align(64));
    carried_[value.expr] = {&value, scratch};
  }
}

EmittedKernel CpuKernelEmitter::emitFunction(const std::string &name) {
  llvm::Type *pointer = builder_.getPtrTy();
  auto *type = llvm::FunctionType::get(
      builder_.getVoidTy(),
      {pointer, builder_.getInt64Ty(), builder_.getInt64Ty()}, false);
  function_ = llvm::Function::Create(type, llvm::Function::ExternalLinkage,
                                     name, module_);
  setTargetAttributes(*function_, host_);
  function_->setDoesNotThrow();
  function_->getArg(0)->setName("buffers");
  beginArgument_ = function_->getArg(1);
  beginArgument_->setName("begin");
  endArgument_ = function_->getArg(2);
  endArgument_->setName("end");
  entry_ = llvm::BasicBlock::Create(context_, "entry", function_);
  builder_.SetInsertPoint(entry_);

  size_t maxRanges = 0;
  for (const loop::Loop &loop : kernel_.loops)
    maxRanges = std::max(maxRanges, loop.ranges.size());
  vars_.assign(kernel_.outerRanges.size() + maxRanges, nullptr);
  scopes_.assign(1, Scope());
  loadSymbols();
  makeCarriedArrays();
  // Carried values over ranges that vary fit their arrays only where the
  // call's points are at most kMaxCarried: the body is emitted twice, with
  // and without them, and the call's sizes pick one.
  llvm::Value *fits = nullptr;
  for (const CarriedValue &value : schedule_.carried) {
    const loop::Ranges &ranges = kernel_.loops[value.producer].ranges;
    if (ranges.isStatic())
      continue;
    llvm::Value *fit = builder_.CreateICmpSLE(sizeValue(ranges.numel()),
                                              builder_.getInt64(kMaxCarried));
    fits = fits ? builder_.CreateAnd(fits, fit) : fit;
  }
  if (!fits) {
    emitOuter(0);
  } else {
    auto *withCarried =
        llvm::BasicBlock::Create(context_, "carried", function_);
    auto *without = llvm::BasicBlock::Create(context_, "recomputed", function_);
    auto *done = llvm::BasicBlock::Create(context_, "done", function_);
    builder_.CreateCondBr(fits, withCarried, without);
    builder_.SetInsertPoint(withCarried);
    emitOuter(0);
    builder_.CreateBr(done);
    // The second body computes everything anew: nothing of the first
    // dominates it.
    builder_.SetInsertPoint(without);
    scopes_.assign(1, Scope());
    std::fill(vars_.begin(), vars_.end(), nullptr);
    std::fill(reductionValues_.begin(), reductionValues_.end(), nullptr);
    varyingMemo_.clear();
    carried_.clear();
    emitOuter(0);
    builder_.CreateBr(done);
    builder_.SetInsertPoint(done);
  }
  // Non-temporal stores are weakly ordered: fence them before the thread
  // that waits for this one reads the output.
  if (schedule_.streamedStore)
    builder_.CreateIntrinsic(llvm::Intrinsic::x86_sse_sfence, {}, {});
  builder_.CreateRetVoid();
  EmittedKernel emitted;
  emitted.function = function_;
  emitted.buffers = slots_;
  return emitted;
}

/// A contraction's stored value at one point of its GEMM's write: the
/// loop emitter's expressions (vector loads, gathers, math) with buffers
/// read from the GEMM's argument slots, the outer variables and the sum
/// given by the GEMM.
class EpilogueEmitter : public CpuKernelEmitter {
public:
  EpilogueEmitter(llvm::Module &module, const loop::Program &program,
                  const loop::Kernel &kernel, const HostTarget &host,
                  const MathLibrary &math,
                  const std::unordered_map<int64_t, int64_t> &slotOf,
                  llvm::Value *buffers)
      : CpuKernelEmitter(module, program, kernel, noSchedule(), host, math),
        slotOf_(slotOf), buffers_(buffers) {}

  llvm::Value *emitAt(llvm::IRBuilder<> &outer, const Expr *value,
                      const std::vector<llvm::Value *> &outerVars,
                      llvm::Value *sum, int lanes) {
    builder_.SetInsertPoint(outer.GetInsertBlock());
    vars_ = outerVars;
    vars_.push_back(nullptr); // k: summed over already
    reductionValues_ = {sum};
    scopes_.assign(1, {});
    if (lanes > 1)
      enterVector(static_cast<int64_t>(outerVars.size()) - 1, lanes);
    llvm::Value *result = emit(value, lanes > 1);
    outer.SetInsertPoint(builder_.GetInsertBlock());
    return result;
  }

protected:
  llvm::Value *bufferPointer(int64_t buffer) override {
    return builder_.CreateLoad(builder_.getPtrTy(),
                               builder_.CreateConstGEP1_64(builder_.getPtrTy(),
                                                           buffers_,
                                                           slotOf_.at(buffer)));
  }

private:
  static const KernelSchedule &noSchedule() {
    static const KernelSchedule schedule;
    return schedule;
  }
  const std::unordered_map<int64_t, int64_t> &slotOf_;
  llvm::Value *buffers_;
};

} // namespace

GemmEpilogue
contractionEpilogue(llvm::Module &module, const loop::Program &program,
                    const loop::Kernel &kernel, const loop::Expr *value,
                    std::unordered_map<int64_t, int64_t> slotOf,
                    const HostTarget &host, const MathLibrary &math) {
  // Outer ranges [row, column] or [batch, row, column digits...]: the
  // epilogue reads the digits as one flat column (matchContraction), the
  // last digit that column and the others 0.
  size_t outer = kernel.outerRanges.size();
  bool batched = outer >= 3;
  size_t columnDigits = outer - (batched ? 2 : 1);
  return [&module, &program, &kernel, value, slotOf = std::move(slotOf), &host,
          &math, batched, columnDigits](llvm::IRBuilder<> &builder,
                                        llvm::Value *buffers, llvm::Value *sum,
                                        llvm::Value *batch, llvm::Value *row,
                                        llvm::Value *column, int lanes) {
    EpilogueEmitter emitter(module, program, kernel, host, math, slotOf,
                            buffers);
    std::vector<llvm::Value *> vars;
    if (batched)
      vars.push_back(batch);
    vars.push_back(row);
    for (size_t digit = 1; digit < columnDigits; ++digit)
      vars.push_back(builder.getInt64(0));
    vars.push_back(column);
    return emitter.emitAt(builder, value, vars, sum, lanes);
  };
}

EmittedKernel emitCpuKernel(llvm::Module &module, const loop::Program &program,
                            const loop::Kernel &kernel,
                            const KernelSchedule &schedule,
                            const std::string &name, const HostTarget &host,
                            const MathLibrary &math) {
  CpuKernelEmitter emitter(module, program, kernel, schedule, host, math);
  return emitter.emitFunction(name);
}

} // namespace kiln::backend
