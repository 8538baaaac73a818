// Emits one loop-IR kernel as an LLVM function over explicit vector types:
// expressions are computed at one lane (scalar) or at the kernel's vector
// width, loads are contiguous vectors, splats or gathers by their affine
// coefficient in the vectorised variable.
// Depends on backend/cpu/KernelEmitter.h, backend/cpu/InlineMath.h,
// backend/cpu/MathLibrary.h, LLVM.
#include "backend/cpu/KernelEmitter.h"

#include "backend/cpu/InlineMath.h"
#include "backend/cpu/MathLibrary.h"
#include "ir/Error.h"

#include <llvm/ADT/APFloat.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <unordered_map>
#include <unordered_set>

namespace kiln::backend {
namespace {

using loop::BinaryOp;
using loop::Expr;
using loop::ExprKind;
using loop::ReduceOp;
using loop::UnaryOp;

bool isUnsignedType(DType dtype) {
  return dtype == DType::UInt8 || dtype == DType::Bool;
}

// Bytes of the type a value of `dtype` is computed in.
int computeBytes(DType dtype) {
  if (dtype == DType::Float64 || dtype == DType::Int64)
    return 8;
  return 4;
}

// Elements a float sum adds before the block's partial sum is folded into
// the (compensated) total, per lane.
constexpr int64_t kSumBlockPerLane = 256;

/// The values that carry a reduction across the points of its loop, as
/// stack slots that SROA turns into registers.
struct Accumulator {
  llvm::AllocaInst *value = nullptr;
  llvm::AllocaInst *index = nullptr;        // ArgMax/ArgMin
  llvm::AllocaInst *partial = nullptr;      // float Sum: the current block
  llvm::AllocaInst *compensation = nullptr; // float Sum: Kahan's error term
  int lanes = 1;
};

class KernelEmitter {
public:
  KernelEmitter(llvm::Module &module, const loop::Program &program,
                const loop::Kernel &kernel, const HostTarget &host,
                const MathLibrary &math)
      : module_(module), context_(module.getContext()), builder_(context_),
        program_(program), kernel_(kernel), host_(host), math_(math),
        outerCount_(static_cast<int64_t>(kernel.outerRanges.size())) {}

  EmittedKernel emit(const std::string &name);

private:
  // Planning.
  void chooseStrategy();
  void planStreaming();
  void planParallel();

  // Types and constants.
  llvm::Type *computeType(DType dtype);
  llvm::Type *storageType(DType dtype);
  llvm::Type *withLanes(llvm::Type *type, int lanes);
  static int lanesOf(llvm::Value *value);
  llvm::Value *splat(llvm::Value *value, int lanes);
  llvm::Value *constantOf(const Expr *expr);
  llvm::Value *integerLike(llvm::Value *like, int64_t value);
  llvm::Value *floatLike(llvm::Value *like, double value);
  llvm::Value *laneOffsets(int lanes);

  // Expressions.
  bool varying(const Expr *expr);
  bool indexReadsVectorReduction(const Expr *expr);
  llvm::Value *emit(const Expr *expr, bool vector);
  llvm::Value *emitNode(const Expr *expr, bool vector);
  llvm::Value *emitLoad(const Expr *expr, bool vector);
  llvm::Value *emitUnary(UnaryOp op, llvm::Value *x, DType dtype);
  llvm::Value *emitBinary(BinaryOp op, llvm::Value *a, llvm::Value *b,
                          DType dtype);
  llvm::Value *emitIntegerDivision(BinaryOp op, llvm::Value *a, llvm::Value *b,
                                   bool isUnsigned);
  llvm::Value *remainderAgainstDivisor(llvm::Value *remainder,
                                       llvm::Value *divisor);
  llvm::Value *emitFloatFloorDivision(llvm::Value *a, llvm::Value *b);
  llvm::Value *emitIntegerPower(llvm::Value *base, llvm::Value *exponent,
                                bool isUnsigned);
  llvm::Value *emitCast(llvm::Value *value, DType from, DType to);
  llvm::Value *roundTo(DType dtype, llvm::Value *value);
  llvm::Value *fromStorage(DType dtype, llvm::Value *value);
  llvm::Value *toStorage(DType dtype, llvm::Value *value);
  llvm::Value *callMath(const char *name, std::vector<llvm::Value *> args);
  llvm::Value *callIntrinsic(llvm::Intrinsic::ID id,
                             std::vector<llvm::Value *> args);
  llvm::Value *bufferPointer(int64_t buffer);
  void emitStores(const std::vector<loop::Store> &stores);

  // Loops and reductions.
  void emitCountedLoop(llvm::Value *start, llvm::Value *end, int64_t step,
                       const std::function<void(llvm::Value *)> &body);
  void emitOuter(size_t level);
  llvm::Value *alignedStart(size_t var, llvm::Value *start, llvm::Value *end);
  llvm::Value *emitAlignmentPeel(size_t level, llvm::Value *start,
                                 llvm::Value *end);
  void emitPoint();
  void emitLoopNest(size_t loopIndex, size_t reductionBase);
  std::vector<Accumulator> makeAccumulators(const loop::Loop &loop, int lanes);
  llvm::Value *identity(ReduceOp op, DType dtype, int lanes);
  llvm::Value *combine(ReduceOp op, DType dtype, llvm::Value *a,
                       llvm::Value *b);
  std::pair<llvm::Value *, llvm::Value *>
  combineArg(ReduceOp op, DType dtype, llvm::Value *valueA, llvm::Value *indexA,
             llvm::Value *valueB, llvm::Value *indexB);
  void accumulate(const loop::Loop &loop, std::vector<Accumulator> &accs,
                  llvm::Value *position);
  void resetPartials(const loop::Loop &loop, std::vector<Accumulator> &accs);
  void foldPartials(const loop::Loop &loop, std::vector<Accumulator> &accs);
  std::pair<llvm::Value *, llvm::Value *> finalValue(const Accumulator &acc);
  std::pair<llvm::Value *, llvm::Value *> narrowLanes(ReduceOp op, DType dtype,
                                                      llvm::Value *value,
                                                      llvm::Value *position,
                                                      int lanes);
  static bool isFloatSum(const loop::Reduction &reduction);
  void enterVector(int64_t var, int lanes);
  void leaveVector();

  llvm::Module &module_;
  llvm::LLVMContext &context_;
  llvm::IRBuilder<> builder_;
  const loop::Program &program_;
  const loop::Kernel &kernel_;
  const HostTarget &host_;
  const MathLibrary &math_;
  int64_t outerCount_;

  VectorStrategy strategy_ = VectorStrategy::Scalar;
  /// Leading outer loops that the [begin, end) arguments flatten.
  size_t parallelDepth_ = 0;
  int lanes_ = 1;
  // Vector registers one step of a vector loop covers: independent
  // accumulators and more loads in flight, before a loop of single vectors
  // and a scalar tail.
  int unroll_ = 1;
  std::vector<int> vectorWidths() const;
  // Values a loop computes that a later loop of the same point computes
  // again (softmax's exp): the first stores them to a stack array by
  // position, the later ones load them.
  struct Carried {
    size_t producer;
    std::vector<size_t> consumers;
    llvm::AllocaInst *scratch = nullptr;
  };
  std::unordered_map<const Expr *, Carried> carried_;
  size_t currentLoop_ = 0;
  llvm::Value *loopPosition_ = nullptr; // the first lane's point in its loop
  void planCarried();
  llvm::Value *carriedSlot(const Expr *expr, bool producer);
  llvm::Value *loadCarried(const Expr *expr, bool vector);
  void storeCarried(const Expr *expr, llvm::Value *value);
  std::vector<bool> innerVectorLoop_;
  // The store a kernel writes with non-temporal vector stores (planStreaming),
  // aligned to the vector's bytes by a scalar prologue.
  const loop::Store *streamedStore_ = nullptr;
  size_t streamedLoop_ = 0; // the loop whose vector loop streams (Inner)
  int64_t streamAlignment_ = 0;

  llvm::Function *function_ = nullptr;
  llvm::BasicBlock *entry_ = nullptr;
  llvm::Value *beginArgument_ = nullptr;
  llvm::Value *endArgument_ = nullptr;
  std::unordered_map<int64_t, llvm::Value *> bufferPointers_;
  std::vector<int64_t> slots_; // the program buffer of each argument slot

  // The emission context.
  int64_t vectorVar_ = -1;
  int currentLanes_ = 1;
  std::vector<llvm::Value *> vars_;
  std::vector<llvm::Value *> reductionValues_;
  struct Scope {
    std::unordered_map<const Expr *, llvm::Value *> scalar, vector;
  };
  std::vector<Scope> scopes_;
  std::unordered_map<const Expr *, bool> varyingMemo_;
};

// ---------------------------------------------------------------- planning

namespace {

// The arithmetic nodes of a value, outside the index expressions of its loads.
int64_t countOperations(const Expr *value) {
  std::unordered_set<const Expr *> seen;
  int64_t count = 0;
  std::function<void(const Expr *)> visit = [&](const Expr *node) {
    if (!seen.insert(node).second || node->kind() == ExprKind::Load)
      return;
    if (node->kind() != ExprKind::Constant && node->kind() != ExprKind::Var &&
        node->kind() != ExprKind::ReductionValue)
      ++count;
    for (const Expr *operand : node->operands())
      visit(operand);
  };
  visit(value);
  return count;
}

} // namespace

// Picks how to vectorise by estimating the instructions each choice issues
// per outer point. Loops whose innermost variable has no contiguous access
// stay scalar under the inner strategy.
void KernelEmitter::chooseStrategy() {
  // One walk over every access: what each loop does per point, counted
  // before the vector width (which depends on the widest type) is known.
  struct LoopCounts {
    double trip = 1, accesses = 0, operations = 0;
    double outerGathers = 0, innerGathers = 0;
  };
  std::vector<LoopCounts> counts(kernel_.loops.size());
  int maxBytes = 4;
  int64_t lastOuter = outerCount_ - 1;
  bool outerContiguous = false;
  innerVectorLoop_.assign(kernel_.loops.size(), false);
  for (size_t loopIndex = 0; loopIndex < kernel_.loops.size(); ++loopIndex) {
    const loop::Loop &loop = kernel_.loops[loopIndex];
    LoopCounts &count = counts[loopIndex];
    int64_t lastVar =
        outerCount_ + static_cast<int64_t>(loop.ranges.size()) - 1;
    for (int64_t range : loop.ranges)
      count.trip *= static_cast<double>(std::max<int64_t>(range, 1));
    int64_t contiguous = 0, other = 0;
    // A gather when the index walks `var` neither contiguously nor not at
    // all; true when it walks it contiguously.
    auto classify = [](const Expr *index, int64_t var, double &gathers) {
      std::optional<int64_t> coefficient = loop::affineCoefficient(index, var);
      if (!coefficient || (*coefficient != 0 && *coefficient != 1))
        gathers += 1;
      return coefficient && *coefficient == 1;
    };
    auto visitIndex = [&](const Expr *index, DType dtype) {
      maxBytes = std::max(maxBytes, computeBytes(dtype));
      count.accesses += 1;
      if (lastOuter >= 0 && classify(index, lastOuter, count.outerGathers))
        outerContiguous = true;
      if (!loop.ranges.empty()) {
        double gathers = 0;
        if (classify(index, lastVar, gathers))
          ++contiguous;
        else if (gathers > 0)
          ++other;
        count.innerGathers += gathers;
      }
    };
    auto visitValue = [&](const Expr *value) {
      count.operations += static_cast<double>(countOperations(value));
      for (const Expr *load : loop::loadsOf(value))
        visitIndex(load->index(), load->dtype());
    };
    for (const loop::Reduction &reduction : loop.reductions)
      visitValue(reduction.value);
    for (const loop::Store &store : loop.stores) {
      visitValue(store.value);
      visitIndex(store.index, program_.buffers.at(store.buffer).dtype());
    }
    innerVectorLoop_[loopIndex] =
        !loop.ranges.empty() && contiguous > 0 && contiguous >= other;
  }

  // Instructions per outer point: an access costs one per vector, or one
  // per lane when it is a gather or scatter; an operation one per vector.
  int lanes = std::max(2, host_.vectorBits / (8 * maxBytes));
  double outerCost = 0, innerCost = 0, scalarCost = 0;
  for (size_t loopIndex = 0; loopIndex < counts.size(); ++loopIndex) {
    const LoopCounts &count = counts[loopIndex];
    double scalar = count.trip * (count.accesses + count.operations);
    auto vectorCost = [&](double gathers) {
      return count.trip *
             (count.accesses + gathers * (lanes - 1) + count.operations) /
             lanes;
    };
    scalarCost += scalar;
    outerCost += vectorCost(count.outerGathers);
    innerCost +=
        innerVectorLoop_[loopIndex] ? vectorCost(count.innerGathers) : scalar;
  }
  bool outerWorks = outerCount_ > 0 && outerContiguous;
  bool innerWorks = std::find(innerVectorLoop_.begin(), innerVectorLoop_.end(),
                              true) != innerVectorLoop_.end();
  strategy_ = VectorStrategy::Scalar;
  double best = scalarCost;
  if (innerWorks && innerCost < best) {
    strategy_ = VectorStrategy::Inner;
    best = innerCost;
  }
  if (outerWorks && outerCost < best)
    strategy_ = VectorStrategy::Outer;
  lanes_ = strategy_ == VectorStrategy::Scalar ? 1 : lanes;
  unroll_ = strategy_ == VectorStrategy::Scalar ? 1 : host_.unroll;
}

// A kernel whose vectorised output is at least host_.streamingBytes writes
// it with non-temporal stores: they skip reading each line before
// overwriting it and leave the caches to the inputs, where the output is
// too large to stay in them for its reader anyway. One store per kernel
// (its alignment prologue fits one address): a flat kernel's, or that of
// the loop of a row kernel that only stores (aligned row by row).
void KernelEmitter::planStreaming() {
  if (host_.streamingBytes <= 0)
    return;
  int64_t outerPoints = numelOf(kernel_.outerRanges);
  for (size_t loopIndex = 0; loopIndex < kernel_.loops.size(); ++loopIndex) {
    const loop::Loop &loop = kernel_.loops[loopIndex];
    int64_t var;
    if (strategy_ == VectorStrategy::Outer && kernel_.outerRanges.size() == 1 &&
        kernel_.loops.size() == 1 && loop.ranges.empty())
      var = 0;
    else if (strategy_ == VectorStrategy::Inner &&
             innerVectorLoop_[loopIndex] && !loop.ranges.empty() &&
             loop.reductions.empty())
      var = outerCount_ + static_cast<int64_t>(loop.ranges.size()) - 1;
    else
      continue;
    int64_t points = outerPoints * numelOf(loop.ranges);
    for (const loop::Store &store : loop.stores) {
      std::optional<int64_t> coefficient =
          loop::affineCoefficient(store.index, var);
      int64_t size = itemSize(program_.buffers.at(store.buffer).dtype());
      if (!coefficient || *coefficient != 1 ||
          points * size < host_.streamingBytes)
        continue;
      streamedStore_ = &store;
      streamedLoop_ = loopIndex;
      streamAlignment_ = size * lanes_;
      return;
    }
  }
}

std::vector<int> KernelEmitter::vectorWidths() const {
  if (unroll_ > 1)
    return {lanes_ * unroll_, lanes_};
  return {lanes_};
}

// ------------------------------------------------------ types and constants

llvm::Type *KernelEmitter::computeType(DType dtype) {
  switch (dtype) {
  case DType::Bool:
    return builder_.getInt1Ty();
  case DType::UInt8:
  case DType::Int8:
    return builder_.getInt8Ty();
  case DType::Int16:
    return builder_.getInt16Ty();
  case DType::Int32:
    return builder_.getInt32Ty();
  case DType::Int64:
    return builder_.getInt64Ty();
  case DType::Float16:
  case DType::BFloat16:
  case DType::Float32:
    return builder_.getFloatTy();
  case DType::Float64:
    return builder_.getDoubleTy();
  default:
    throw Unsupported("the CPU code generator does not support " +
                      std::string(dtypeName(dtype)) + " tensors");
  }
}

llvm::Type *KernelEmitter::storageType(DType dtype) {
  switch (dtype) {
  case DType::Bool:
    return builder_.getInt8Ty();
  case DType::Float16:
    return builder_.getHalfTy();
  case DType::BFloat16:
    return builder_.getInt16Ty();
  default:
    return computeType(dtype);
  }
}

llvm::Type *KernelEmitter::withLanes(llvm::Type *type, int lanes) {
  return lanes == 1 ? type : llvm::FixedVectorType::get(type, lanes);
}

int KernelEmitter::lanesOf(llvm::Value *value) {
  if (auto *type = llvm::dyn_cast<llvm::FixedVectorType>(value->getType()))
    return static_cast<int>(type->getNumElements());
  return 1;
}

llvm::Value *KernelEmitter::splat(llvm::Value *value, int lanes) {
  if (lanes == 1 || lanesOf(value) == lanes)
    return value;
  return builder_.CreateVectorSplat(lanes, value);
}

llvm::Value *KernelEmitter::integerLike(llvm::Value *like, int64_t value) {
  return llvm::ConstantInt::get(like->getType(), static_cast<uint64_t>(value),
                                true);
}

llvm::Value *KernelEmitter::floatLike(llvm::Value *like, double value) {
  return llvm::ConstantFP::get(like->getType(), value);
}

llvm::Value *KernelEmitter::laneOffsets(int lanes) {
  std::vector<llvm::Constant *> offsets;
  for (int lane = 0; lane < lanes; ++lane)
    offsets.push_back(builder_.getInt64(lane));
  return llvm::ConstantVector::get(offsets);
}

float roundToBFloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if (std::isnan(value))
    bits = (bits | 0x400000u) & 0xFFFF0000u;
  else
    bits = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&value, &bits, sizeof bits);
  return value;
}

llvm::Value *KernelEmitter::constantOf(const Expr *expr) {
  DType dtype = expr->dtype();
  llvm::Type *type = computeType(dtype);
  if (!isFloatingPoint(dtype))
    return llvm::ConstantInt::get(type, static_cast<uint64_t>(expr->integer()),
                                  true);
  double value = expr->real();
  if (dtype == DType::Float16) {
    llvm::APFloat half(value);
    bool lost;
    half.convert(llvm::APFloat::IEEEhalf(), llvm::APFloat::rmNearestTiesToEven,
                 &lost);
    half.convert(llvm::APFloat::IEEEsingle(),
                 llvm::APFloat::rmNearestTiesToEven, &lost);
    return llvm::ConstantFP::get(context_, half);
  }
  if (dtype == DType::BFloat16)
    value = roundToBFloat16(static_cast<float>(value));
  return llvm::ConstantFP::get(type, value);
}

// ------------------------------------------------------------- expressions

bool KernelEmitter::varying(const Expr *expr) {
  if (currentLanes_ == 1)
    return false;
  auto found = varyingMemo_.find(expr);
  if (found != varyingMemo_.end())
    return found->second;
  bool result = false;
  switch (expr->kind()) {
  case ExprKind::Constant:
    break;
  case ExprKind::Var:
    result = expr->id() == vectorVar_;
    break;
  case ExprKind::ReductionValue: {
    llvm::Value *value = reductionValues_.at(expr->id());
    result = value && lanesOf(value) > 1;
    break;
  }
  default:
    for (const Expr *operand : expr->operands())
      result = result || varying(operand);
  }
  varyingMemo_[expr] = result;
  return result;
}

bool KernelEmitter::indexReadsVectorReduction(const Expr *expr) {
  if (expr->kind() == ExprKind::ReductionValue)
    return varying(expr);
  for (const Expr *operand : expr->operands())
    if (indexReadsVectorReduction(operand))
      return true;
  return false;
}

llvm::Value *KernelEmitter::emit(const Expr *expr, bool vector) {
  vector = vector && currentLanes_ > 1;
  if (vector && !varying(expr))
    return splat(emit(expr, false), currentLanes_);
  for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
    auto &cache = vector ? scope->vector : scope->scalar;
    auto found = cache.find(expr);
    if (found != cache.end())
      return found->second;
  }
  llvm::Value *value = loadCarried(expr, vector);
  if (!value) {
    value = emitNode(expr, vector);
    storeCarried(expr, value);
  }
  (vector ? scopes_.back().vector : scopes_.back().scalar)[expr] = value;
  return value;
}

llvm::Value *KernelEmitter::emitNode(const Expr *expr, bool vector) {
  switch (expr->kind()) {
  case ExprKind::Constant:
    return constantOf(expr);
  case ExprKind::Var: {
    llvm::Value *value = vars_.at(expr->id());
    if (!value)
      throw Error("loop IR: a kernel reads a variable outside its loop");
    if (vector)
      return builder_.CreateAdd(splat(value, currentLanes_),
                                laneOffsets(currentLanes_));
    return value;
  }
  case ExprKind::ReductionValue: {
    llvm::Value *value = reductionValues_.at(expr->id());
    if (!value)
      throw Error("loop IR: a kernel reads a reduction before it is final");
    if (!vector && lanesOf(value) > 1)
      return builder_.CreateExtractElement(value, uint64_t(0));
    return value;
  }
  case ExprKind::Load:
    return emitLoad(expr, vector);
  case ExprKind::Unary: {
    DType dtype = expr->operand(0)->dtype();
    llvm::Value *result =
        emitUnary(expr->unaryOp(), emit(expr->operand(0), vector), dtype);
    return roundTo(expr->dtype(), result);
  }
  case ExprKind::Binary: {
    DType dtype = expr->operand(0)->dtype();
    llvm::Value *a = emit(expr->operand(0), vector);
    llvm::Value *b = emit(expr->operand(1), vector);
    return roundTo(expr->dtype(), emitBinary(expr->binaryOp(), a, b, dtype));
  }
  case ExprKind::Where:
    return builder_.CreateSelect(emit(expr->operand(0), vector),
                                 emit(expr->operand(1), vector),
                                 emit(expr->operand(2), vector));
  case ExprKind::Cast:
    return emitCast(emit(expr->operand(0), vector), expr->operand(0)->dtype(),
                    expr->dtype());
  case ExprKind::MulAdd: {
    // llvm.fmuladd: one fma where the target has one, mul and add where not.
    llvm::Value *a = emit(expr->operand(0), vector);
    llvm::Value *b = emit(expr->operand(1), vector);
    llvm::Value *c = emit(expr->operand(2), vector);
    return roundTo(expr->dtype(),
                   builder_.CreateIntrinsic(llvm::Intrinsic::fmuladd,
                                            {a->getType()}, {a, b, c}));
  }
  }
  throw Error("loop IR: unknown expression kind");
}

llvm::Value *KernelEmitter::bufferPointer(int64_t buffer) {
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

llvm::Value *KernelEmitter::emitLoad(const Expr *expr, bool vector) {
  int64_t buffer = expr->id();
  DType dtype = program_.buffers.at(buffer).dtype();
  llvm::Type *storage = storageType(dtype);
  llvm::Value *base = bufferPointer(buffer);
  llvm::Value *loaded;
  if (!vector) {
    llvm::Value *address =
        builder_.CreateGEP(storage, base, emit(expr->index(), false));
    loaded = builder_.CreateAlignedLoad(storage, address,
                                        llvm::Align(itemSize(dtype)));
  } else {
    std::optional<int64_t> coefficient =
        loop::affineCoefficient(expr->index(), vectorVar_);
    llvm::Type *vectorType = withLanes(storage, currentLanes_);
    if (coefficient && *coefficient == 1 &&
        !indexReadsVectorReduction(expr->index())) {
      llvm::Value *address =
          builder_.CreateGEP(storage, base, emit(expr->index(), false));
      loaded = builder_.CreateAlignedLoad(vectorType, address, llvm::Align(1));
    } else {
      llvm::Value *addresses =
          builder_.CreateGEP(storage, base, emit(expr->index(), true));
      loaded = builder_.CreateMaskedGather(vectorType, addresses,
                                           llvm::Align(itemSize(dtype)));
    }
  }
  return emitCast(fromStorage(dtype, loaded), dtype, expr->dtype());
}

void KernelEmitter::emitStores(const std::vector<loop::Store> &stores) {
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
    item.streamed = item.contiguous && &store == streamedStore_;
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
          item.value, address, llvm::Align(streamAlignment_));
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

llvm::Value *KernelEmitter::fromStorage(DType dtype, llvm::Value *value) {
  int lanes = lanesOf(value);
  switch (dtype) {
  case DType::Bool:
    return builder_.CreateICmpNE(value, integerLike(value, 0));
  case DType::Float16:
    return builder_.CreateFPExt(value, withLanes(builder_.getFloatTy(), lanes));
  case DType::BFloat16: {
    llvm::Value *wide =
        builder_.CreateZExt(value, withLanes(builder_.getInt32Ty(), lanes));
    wide = builder_.CreateShl(wide, integerLike(wide, 16));
    return builder_.CreateBitCast(wide,
                                  withLanes(builder_.getFloatTy(), lanes));
  }
  default:
    return value;
  }
}

llvm::Value *KernelEmitter::toStorage(DType dtype, llvm::Value *value) {
  int lanes = lanesOf(value);
  switch (dtype) {
  case DType::Bool:
    return builder_.CreateZExt(value, withLanes(builder_.getInt8Ty(), lanes));
  case DType::Float16:
    return builder_.CreateFPTrunc(value,
                                  withLanes(builder_.getHalfTy(), lanes));
  case DType::BFloat16: {
    llvm::Value *bits =
        builder_.CreateBitCast(value, withLanes(builder_.getInt32Ty(), lanes));
    bits = builder_.CreateLShr(bits, integerLike(bits, 16));
    return builder_.CreateTrunc(bits, withLanes(builder_.getInt16Ty(), lanes));
  }
  default:
    return value;
  }
}

// Rounds a float32 value to the nearest value of `dtype` (half or bfloat16),
// ties to even; others are returned as they are.
llvm::Value *KernelEmitter::roundTo(DType dtype, llvm::Value *value) {
  int lanes = lanesOf(value);
  if (dtype == DType::Float16)
    return builder_.CreateFPExt(
        builder_.CreateFPTrunc(value, withLanes(builder_.getHalfTy(), lanes)),
        withLanes(builder_.getFloatTy(), lanes));
  if (dtype != DType::BFloat16)
    return value;
  llvm::Value *bits =
      builder_.CreateBitCast(value, withLanes(builder_.getInt32Ty(), lanes));
  llvm::Value *lowestKept = builder_.CreateAnd(
      builder_.CreateLShr(bits, integerLike(bits, 16)), integerLike(bits, 1));
  llvm::Value *rounded = builder_.CreateAdd(
      builder_.CreateAdd(bits, integerLike(bits, 0x7FFF)), lowestKept);
  llvm::Value *quiet = builder_.CreateOr(bits, integerLike(bits, 0x400000));
  llvm::Value *isNan = builder_.CreateFCmpUNO(value, value);
  llvm::Value *result =
      builder_.CreateAnd(builder_.CreateSelect(isNan, quiet, rounded),
                         integerLike(bits, static_cast<int64_t>(0xFFFF0000u)));
  return builder_.CreateBitCast(result, value->getType());
}

llvm::Value *KernelEmitter::callIntrinsic(llvm::Intrinsic::ID id,
                                          std::vector<llvm::Value *> args) {
  return builder_.CreateIntrinsic(id, {args[0]->getType()}, args);
}

llvm::Value *KernelEmitter::callMath(const char *name,
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

const char *mathFunctionName(UnaryOp op) {
  switch (op) {
  case UnaryOp::Exp:
    return "exp";
  case UnaryOp::Exp2:
    return "exp2";
  case UnaryOp::Expm1:
    return "expm1";
  case UnaryOp::Log:
    return "log";
  case UnaryOp::Log2:
    return "log2";
  case UnaryOp::Log10:
    return "log10";
  case UnaryOp::Log1p:
    return "log1p";
  case UnaryOp::Sin:
    return "sin";
  case UnaryOp::Cos:
    return "cos";
  case UnaryOp::Tan:
    return "tan";
  case UnaryOp::Asin:
    return "asin";
  case UnaryOp::Acos:
    return "acos";
  case UnaryOp::Atan:
    return "atan";
  case UnaryOp::Sinh:
    return "sinh";
  case UnaryOp::Cosh:
    return "cosh";
  case UnaryOp::Tanh:
    return "tanh";
  case UnaryOp::Asinh:
    return "asinh";
  case UnaryOp::Acosh:
    return "acosh";
  case UnaryOp::Atanh:
    return "atanh";
  case UnaryOp::Erf:
    return "erf";
  case UnaryOp::Erfc:
    return "erfc";
  case UnaryOp::Lgamma:
    return "lgamma";
  default:
    return nullptr;
  }
}

llvm::Value *KernelEmitter::emitUnary(UnaryOp op, llvm::Value *x, DType dtype) {
  auto unsupported = [&]() -> llvm::Value * {
    throw Unsupported("the CPU code generator cannot compute " +
                      std::string(loop::unaryOpName(op)) + " of " +
                      std::string(dtypeName(dtype)));
  };
  if (isFloatingPoint(dtype)) {
    bool isFloat = x->getType()->getScalarType()->isFloatTy();
    if (isFloat && op == UnaryOp::Exp)
      return emitInlineExpF32(builder_, x);
    if (isFloat && op == UnaryOp::Tanh)
      return emitInlineTanhF32(builder_, x);
    if (isFloat && op == UnaryOp::Erf)
      return emitInlineErfF32(builder_, x);
    if (op == UnaryOp::Log1p) {
      // SLEEF's vector log1p gives inf above about 1e307 (1e38 in float);
      // where 1 + x rounds to x, log1p(x) is log(x).
      llvm::Value *huge =
          builder_.CreateFCmpOGT(x, floatLike(x, isFloat ? 0x1p25 : 0x1p54));
      return builder_.CreateSelect(huge, callMath("log", {x}),
                                   callMath("log1p", {x}));
    }
    if (const char *name = mathFunctionName(op))
      return callMath(name, {x});
    switch (op) {
    case UnaryOp::Neg:
      return builder_.CreateFNeg(x);
    case UnaryOp::Abs:
      return callIntrinsic(llvm::Intrinsic::fabs, {x});
    case UnaryOp::Sqrt:
      return callIntrinsic(llvm::Intrinsic::sqrt, {x});
    case UnaryOp::Rsqrt:
      return builder_.CreateFDiv(floatLike(x, 1.0),
                                 callIntrinsic(llvm::Intrinsic::sqrt, {x}));
    case UnaryOp::Reciprocal:
      return builder_.CreateFDiv(floatLike(x, 1.0), x);
    case UnaryOp::Sigmoid: {
      llvm::Value *exponential =
          emitUnary(UnaryOp::Exp, builder_.CreateFNeg(x), dtype);
      return builder_.CreateFDiv(
          floatLike(x, 1.0),
          builder_.CreateFAdd(floatLike(x, 1.0), exponential));
    }
    case UnaryOp::Floor:
      return callIntrinsic(llvm::Intrinsic::floor, {x});
    case UnaryOp::Ceil:
      return callIntrinsic(llvm::Intrinsic::ceil, {x});
    case UnaryOp::Trunc:
      return callIntrinsic(llvm::Intrinsic::trunc, {x});
    case UnaryOp::Round:
      return callIntrinsic(llvm::Intrinsic::roundeven, {x});
    case UnaryOp::Sign: // torch.sign(nan) is 0
      return builder_.CreateSelect(
          builder_.CreateFCmpOGT(x, floatLike(x, 0.0)), floatLike(x, 1.0),
          builder_.CreateSelect(builder_.CreateFCmpOLT(x, floatLike(x, 0.0)),
                                floatLike(x, -1.0), floatLike(x, 0.0)));
    case UnaryOp::LogicalNot:
      return builder_.CreateFCmpOEQ(x, floatLike(x, 0.0));
    case UnaryOp::IsNan:
      return builder_.CreateFCmpUNO(x, x);
    case UnaryOp::IsInf:
      return builder_.CreateFCmpOEQ(callIntrinsic(llvm::Intrinsic::fabs, {x}),
                                    floatLike(x, INFINITY));
    default:
      return unsupported();
    }
  }
  llvm::Value *falseValue =
      llvm::ConstantInt::getFalse(withLanes(builder_.getInt1Ty(), lanesOf(x)));
  if (dtype == DType::Bool) {
    switch (op) {
    case UnaryOp::LogicalNot:
    case UnaryOp::BitwiseNot:
      return builder_.CreateNot(x);
    case UnaryOp::Abs:
    case UnaryOp::Floor:
    case UnaryOp::Ceil:
    case UnaryOp::Round:
    case UnaryOp::Trunc:
    case UnaryOp::Sign:
      return x;
    case UnaryOp::IsNan:
    case UnaryOp::IsInf:
      return falseValue;
    default:
      return unsupported();
    }
  }
  bool isUnsigned = isUnsignedType(dtype);
  switch (op) {
  case UnaryOp::Neg:
    return builder_.CreateNeg(x);
  case UnaryOp::Abs:
    return isUnsigned
               ? x
               : builder_.CreateIntrinsic(llvm::Intrinsic::abs, {x->getType()},
                                          {x, builder_.getFalse()});
  case UnaryOp::Sign: {
    llvm::Value *positive = builder_.CreateZExt(
        isUnsigned ? builder_.CreateICmpNE(x, integerLike(x, 0))
                   : builder_.CreateICmpSGT(x, integerLike(x, 0)),
        x->getType());
    if (isUnsigned)
      return positive;
    llvm::Value *negative = builder_.CreateZExt(
        builder_.CreateICmpSLT(x, integerLike(x, 0)), x->getType());
    return builder_.CreateSub(positive, negative);
  }
  case UnaryOp::Floor:
  case UnaryOp::Ceil:
  case UnaryOp::Round:
  case UnaryOp::Trunc:
    return x;
  case UnaryOp::LogicalNot:
    return builder_.CreateICmpEQ(x, integerLike(x, 0));
  case UnaryOp::BitwiseNot:
    return builder_.CreateNot(x);
  case UnaryOp::IsNan:
  case UnaryOp::IsInf:
    return falseValue;
  default:
    return unsupported();
  }
}

llvm::Value *KernelEmitter::emitIntegerDivision(BinaryOp op, llvm::Value *a,
                                                llvm::Value *b,
                                                bool isUnsigned) {
  // Division by zero must neither trap nor be undefined: divide by 1
  // instead. INT_MIN / -1 overflows: -1 is handled as negation.
  llvm::Value *zero = builder_.CreateICmpEQ(b, integerLike(b, 0));
  if (isUnsigned) {
    llvm::Value *divisor = builder_.CreateSelect(zero, integerLike(b, 1), b);
    bool quotient = op == BinaryOp::Div || op == BinaryOp::FloorDiv;
    return quotient ? builder_.CreateUDiv(a, divisor)
                    : builder_.CreateURem(a, divisor);
  }
  llvm::Value *minusOne = builder_.CreateICmpEQ(b, integerLike(b, -1));
  llvm::Value *divisor = builder_.CreateSelect(
      builder_.CreateOr(zero, minusOne), integerLike(b, 1), b);
  llvm::Value *quotient = builder_.CreateSDiv(a, divisor);
  llvm::Value *remainder = builder_.CreateSRem(a, divisor);
  llvm::Value *negated = builder_.CreateNeg(a);
  // Python rounds toward negative infinity: adjust when the remainder and
  // the divisor have opposite signs.
  llvm::Value *adjust = builder_.CreateAnd(
      builder_.CreateICmpNE(remainder, integerLike(remainder, 0)),
      builder_.CreateICmpSLT(builder_.CreateXor(remainder, b),
                             integerLike(b, 0)));
  switch (op) {
  case BinaryOp::Div:
    return builder_.CreateSelect(minusOne, negated, quotient);
  case BinaryOp::FloorDiv:
    return builder_.CreateSelect(
        minusOne, negated,
        builder_.CreateSub(quotient,
                           builder_.CreateZExt(adjust, a->getType())));
  case BinaryOp::Mod:
    return builder_.CreateAdd(
        remainder, builder_.CreateSelect(adjust, b, integerLike(b, 0)));
  default: // Fmod
    return remainder;
  }
}

// Whether a float fmod remainder is nonzero with the sign opposite to the
// divisor's: where Python's floor division and modulo step one further
// down than C's truncating ones.
llvm::Value *KernelEmitter::remainderAgainstDivisor(llvm::Value *remainder,
                                                    llvm::Value *divisor) {
  return builder_.CreateAnd(
      builder_.CreateFCmpUNE(remainder, floatLike(remainder, 0.0)),
      builder_.CreateXor(
          builder_.CreateFCmpOLT(divisor, floatLike(divisor, 0.0)),
          builder_.CreateFCmpOLT(remainder, floatLike(remainder, 0.0))));
}

// Python's floor division of floats as torch computes it: the quotient of
// a - fmod(a, b), which is exact where floor(a / b) is not (1 // 0.1 is 9:
// a / b rounds up to 10), moved down where the remainder's sign differs
// from the divisor's, then rounded to the nearest integer; a zero quotient
// keeps the sign of a / b, and division by zero gives a / b.
llvm::Value *KernelEmitter::emitFloatFloorDivision(llvm::Value *a,
                                                   llvm::Value *b) {
  llvm::Value *remainder = builder_.CreateFRem(a, b);
  llvm::Value *quotient =
      builder_.CreateFDiv(builder_.CreateFSub(a, remainder), b);
  quotient = builder_.CreateSelect(
      remainderAgainstDivisor(remainder, b),
      builder_.CreateFSub(quotient, floatLike(quotient, 1.0)), quotient);
  llvm::Value *floored = callIntrinsic(llvm::Intrinsic::floor, {quotient});
  floored = builder_.CreateSelect(
      builder_.CreateFCmpOGT(builder_.CreateFSub(quotient, floored),
                             floatLike(quotient, 0.5)),
      builder_.CreateFAdd(floored, floatLike(floored, 1.0)), floored);
  llvm::Value *ratio = builder_.CreateFDiv(a, b);
  llvm::Value *signedZero =
      callIntrinsic(llvm::Intrinsic::copysign, {floatLike(ratio, 0.0), ratio});
  llvm::Value *result = builder_.CreateSelect(
      builder_.CreateFCmpUNE(quotient, floatLike(quotient, 0.0)), floored,
      signedZero);
  return builder_.CreateSelect(builder_.CreateFCmpOEQ(b, floatLike(b, 0.0)),
                               ratio, result);
}

llvm::Value *KernelEmitter::emitIntegerPower(llvm::Value *base,
                                             llvm::Value *exponent,
                                             bool isUnsigned) {
  // Square-and-multiply over every bit of the exponent: exact, wrapping.
  unsigned bits = base->getType()->getScalarSizeInBits();
  llvm::Value *result = integerLike(base, 1);
  llvm::Value *square = base;
  for (unsigned bit = 0; bit < bits; ++bit) {
    llvm::Value *set = builder_.CreateICmpNE(
        builder_.CreateAnd(exponent, integerLike(exponent, int64_t(1) << bit)),
        integerLike(exponent, 0));
    result =
        builder_.CreateSelect(set, builder_.CreateMul(result, square), result);
    square = builder_.CreateMul(square, square);
  }
  if (isUnsigned)
    return result;
  // Negative exponents: only 1 and -1 have integer powers; others give 0.
  llvm::Value *odd = builder_.CreateICmpNE(
      builder_.CreateAnd(exponent, integerLike(exponent, 1)),
      integerLike(exponent, 0));
  llvm::Value *negativePower = builder_.CreateSelect(
      builder_.CreateICmpEQ(base, integerLike(base, 1)), integerLike(base, 1),
      builder_.CreateSelect(builder_.CreateICmpEQ(base, integerLike(base, -1)),
                            builder_.CreateSelect(odd, integerLike(base, -1),
                                                  integerLike(base, 1)),
                            integerLike(base, 0)));
  return builder_.CreateSelect(
      builder_.CreateICmpSLT(exponent, integerLike(exponent, 0)), negativePower,
      result);
}

llvm::Value *KernelEmitter::emitBinary(BinaryOp op, llvm::Value *a,
                                       llvm::Value *b, DType dtype) {
  auto unsupported = [&]() -> llvm::Value * {
    throw Unsupported("the CPU code generator cannot compute " +
                      std::string(loop::binaryOpName(op)) + " of " +
                      std::string(dtypeName(dtype)));
  };
  if (isFloatingPoint(dtype)) {
    auto isTrue = [&](llvm::Value *value) {
      return builder_.CreateFCmpUNE(value, floatLike(value, 0.0));
    };
    switch (op) {
    case BinaryOp::Add:
      return builder_.CreateFAdd(a, b);
    case BinaryOp::Sub:
      return builder_.CreateFSub(a, b);
    case BinaryOp::Mul:
      return builder_.CreateFMul(a, b);
    case BinaryOp::Div:
      return builder_.CreateFDiv(a, b);
    case BinaryOp::FloorDiv:
      return emitFloatFloorDivision(a, b);
    case BinaryOp::Mod: {
      // torch.remainder: fmod, moved into the divisor's sign.
      llvm::Value *remainder = builder_.CreateFRem(a, b);
      return builder_.CreateSelect(remainderAgainstDivisor(remainder, b),
                                   builder_.CreateFAdd(remainder, b),
                                   remainder);
    }
    case BinaryOp::Fmod:
      return builder_.CreateFRem(a, b);
    case BinaryOp::Pow:
      return callMath("pow", {a, b});
    case BinaryOp::Atan2:
      return callMath("atan2", {a, b});
    case BinaryOp::Copysign:
      return callIntrinsic(llvm::Intrinsic::copysign, {a, b});
    case BinaryOp::Max:
      return callIntrinsic(llvm::Intrinsic::maximum, {a, b});
    case BinaryOp::Min:
      return callIntrinsic(llvm::Intrinsic::minimum, {a, b});
    case BinaryOp::Eq:
      return builder_.CreateFCmpOEQ(a, b);
    case BinaryOp::Ne:
      return builder_.CreateFCmpUNE(a, b);
    case BinaryOp::Lt:
      return builder_.CreateFCmpOLT(a, b);
    case BinaryOp::Le:
      return builder_.CreateFCmpOLE(a, b);
    case BinaryOp::Gt:
      return builder_.CreateFCmpOGT(a, b);
    case BinaryOp::Ge:
      return builder_.CreateFCmpOGE(a, b);
    case BinaryOp::LogicalAnd:
      return builder_.CreateAnd(isTrue(a), isTrue(b));
    case BinaryOp::LogicalOr:
      return builder_.CreateOr(isTrue(a), isTrue(b));
    case BinaryOp::LogicalXor:
      return builder_.CreateXor(isTrue(a), isTrue(b));
    default:
      return unsupported();
    }
  }
  bool isBool = dtype == DType::Bool;
  bool isUnsigned = isUnsignedType(dtype);
  auto isTrue = [&](llvm::Value *value) {
    return isBool ? value : builder_.CreateICmpNE(value, integerLike(value, 0));
  };
  unsigned bits = a->getType()->getScalarSizeInBits();
  switch (op) {
  case BinaryOp::Add:
    return isBool ? builder_.CreateOr(a, b) : builder_.CreateAdd(a, b);
  case BinaryOp::Sub:
    return isBool ? builder_.CreateXor(a, b) : builder_.CreateSub(a, b);
  case BinaryOp::Mul:
    return isBool ? builder_.CreateAnd(a, b) : builder_.CreateMul(a, b);
  case BinaryOp::Div:
  case BinaryOp::FloorDiv:
  case BinaryOp::Mod:
  case BinaryOp::Fmod:
    if (isBool)
      return unsupported();
    return emitIntegerDivision(op, a, b, isUnsigned);
  case BinaryOp::Pow:
    if (isBool)
      return unsupported();
    return emitIntegerPower(a, b, isUnsigned);
  case BinaryOp::Max:
    return callIntrinsic(
        isUnsigned ? llvm::Intrinsic::umax : llvm::Intrinsic::smax, {a, b});
  case BinaryOp::Min:
    return callIntrinsic(
        isUnsigned ? llvm::Intrinsic::umin : llvm::Intrinsic::smin, {a, b});
  case BinaryOp::Eq:
    return builder_.CreateICmpEQ(a, b);
  case BinaryOp::Ne:
    return builder_.CreateICmpNE(a, b);
  case BinaryOp::Lt:
    return isUnsigned ? builder_.CreateICmpULT(a, b)
                      : builder_.CreateICmpSLT(a, b);
  case BinaryOp::Le:
    return isUnsigned ? builder_.CreateICmpULE(a, b)
                      : builder_.CreateICmpSLE(a, b);
  case BinaryOp::Gt:
    return isUnsigned ? builder_.CreateICmpUGT(a, b)
                      : builder_.CreateICmpSGT(a, b);
  case BinaryOp::Ge:
    return isUnsigned ? builder_.CreateICmpUGE(a, b)
                      : builder_.CreateICmpSGE(a, b);
  case BinaryOp::LogicalAnd:
    return builder_.CreateAnd(isTrue(a), isTrue(b));
  case BinaryOp::LogicalOr:
    return builder_.CreateOr(isTrue(a), isTrue(b));
  case BinaryOp::LogicalXor:
    return builder_.CreateXor(isTrue(a), isTrue(b));
  case BinaryOp::BitwiseAnd:
    return builder_.CreateAnd(a, b);
  case BinaryOp::BitwiseOr:
    return builder_.CreateOr(a, b);
  case BinaryOp::BitwiseXor:
    return builder_.CreateXor(a, b);
  case BinaryOp::ShiftLeft: {
    if (isBool)
      return unsupported();
    // Amounts past the width (or negative) shift everything out: no poison
    // escapes, because select does not propagate its unchosen operand.
    llvm::Value *tooFar = builder_.CreateICmpUGE(b, integerLike(b, bits));
    return builder_.CreateSelect(tooFar, integerLike(a, 0),
                                 builder_.CreateShl(a, b));
  }
  case BinaryOp::ShiftRight: {
    if (isBool)
      return unsupported();
    llvm::Value *tooFar = builder_.CreateICmpUGE(b, integerLike(b, bits));
    if (isUnsigned)
      return builder_.CreateSelect(tooFar, integerLike(a, 0),
                                   builder_.CreateLShr(a, b));
    llvm::Value *amount =
        builder_.CreateSelect(tooFar, integerLike(b, bits - 1), b);
    return builder_.CreateAShr(a, amount);
  }
  default:
    return unsupported();
  }
}

llvm::Value *KernelEmitter::emitCast(llvm::Value *value, DType from, DType to) {
  if (from == to)
    return value;
  int lanes = lanesOf(value);
  llvm::Type *target = withLanes(computeType(to), lanes);
  computeType(from); // rejects complex sources
  if (to == DType::Bool)
    return isFloatingPoint(from)
               ? builder_.CreateFCmpUNE(value, floatLike(value, 0.0))
               : builder_.CreateICmpNE(value, integerLike(value, 0));
  if (from == DType::Bool)
    return isFloatingPoint(to) ? builder_.CreateUIToFP(value, target)
                               : builder_.CreateZExt(value, target);
  if (isFloatingPoint(from) && isFloatingPoint(to)) {
    // Half types are computed in float: a double rounds to float first, as
    // c10::Half(double) and c10::BFloat16(double) do.
    if (value->getType() != target)
      value = to == DType::Float64 ? builder_.CreateFPExt(value, target)
                                   : builder_.CreateFPTrunc(value, target);
    return roundTo(to, value);
  }
  if (isFloatingPoint(from)) {
    // As eager's static_cast on x86 (cvttss2si / cvttsd2si): 64-bit
    // results convert at 64 bits, every other integer at 32 bits and keeps
    // the low bits (300.0 -> uint8 44, -1.0 -> 255); NaN and values out of
    // the converted width's range give its minimum (the "integer
    // indefinite"), where LLVM's fptosi would be poison.
    unsigned width = to == DType::Int64 ? 64 : 32;
    llvm::Type *wide = withLanes(builder_.getIntNTy(width), lanes);
    double limit = std::ldexp(1.0, static_cast<int>(width) - 1);
    llvm::Value *inRange = builder_.CreateAnd(
        builder_.CreateFCmpOGE(value, floatLike(value, -limit)),
        builder_.CreateFCmpOLT(value, floatLike(value, limit)));
    llvm::Value *converted = builder_.CreateIntrinsic(
        llvm::Intrinsic::fptosi_sat, {wide, value->getType()}, {value});
    llvm::Value *indefinite =
        llvm::ConstantInt::get(wide, llvm::APInt::getSignedMinValue(width));
    llvm::Value *result = builder_.CreateSelect(inRange, converted, indefinite);
    return builder_.CreateIntCast(result, target, /*isSigned=*/true);
  }
  if (isFloatingPoint(to)) {
    llvm::Value *converted = isUnsignedType(from)
                                 ? builder_.CreateUIToFP(value, target)
                                 : builder_.CreateSIToFP(value, target);
    return roundTo(to, converted);
  }
  return builder_.CreateIntCast(value, target, !isUnsignedType(from));
}

// ------------------------------------------------------ loops and reductions

void KernelEmitter::emitCountedLoop(
    llvm::Value *start, llvm::Value *end, int64_t step,
    const std::function<void(llvm::Value *)> &body) {
  llvm::BasicBlock *before = builder_.GetInsertBlock();
  auto *header = llvm::BasicBlock::Create(context_, "loop", function_);
  auto *bodyBlock = llvm::BasicBlock::Create(context_, "body", function_);
  auto *exit = llvm::BasicBlock::Create(context_, "exit", function_);
  builder_.CreateBr(header);
  builder_.SetInsertPoint(header);
  llvm::PHINode *counter = builder_.CreatePHI(builder_.getInt64Ty(), 2, "i");
  counter->addIncoming(start, before);
  builder_.CreateCondBr(builder_.CreateICmpSLT(counter, end), bodyBlock, exit);
  builder_.SetInsertPoint(bodyBlock);
  scopes_.emplace_back();
  body(counter);
  scopes_.pop_back();
  llvm::Value *next = builder_.CreateAdd(counter, builder_.getInt64(step), "",
                                         /*HasNUW=*/false, /*HasNSW=*/true);
  counter->addIncoming(next, builder_.GetInsertBlock());
  builder_.CreateBr(header);
  builder_.SetInsertPoint(exit);
}

void KernelEmitter::enterVector(int64_t var, int lanes) {
  vectorVar_ = var;
  currentLanes_ = lanes;
  varyingMemo_.clear();
}

void KernelEmitter::leaveVector() {
  vectorVar_ = -1;
  currentLanes_ = 1;
  varyingMemo_.clear();
}

// The end of the part of [start, end) that whole vectors of `lanes` cover.
llvm::Value *vectorEnd(llvm::IRBuilder<> &builder, llvm::Value *start,
                       llvm::Value *end, int lanes) {
  llvm::Value *count = builder.CreateSub(end, start);
  llvm::Value *whole =
      builder.CreateMul(builder.CreateSDiv(count, builder.getInt64(lanes)),
                        builder.getInt64(lanes));
  return builder.CreateAdd(start, whole);
}

// How many leading outer loops the [begin, end) arguments range over, as
// one flat loop: enough that the thread pool has chunks to share out even
// where the first loop is short (attention's batch of 2). The vectorised
// outer loop stays a loop of its own.
void KernelEmitter::planParallel() {
  constexpr int64_t kParallelPoints = 256;
  const std::vector<int64_t> &ranges = kernel_.outerRanges;
  size_t limit = ranges.size();
  if (strategy_ == VectorStrategy::Outer && limit > 0)
    --limit;
  parallelDepth_ = std::min<size_t>(ranges.size(), 1);
  int64_t points = ranges.empty() ? 1 : ranges[0];
  while (parallelDepth_ < limit && points < kParallelPoints)
    points *= ranges[parallelDepth_++];
}

void KernelEmitter::emitOuter(size_t level) {
  if (level == kernel_.outerRanges.size()) {
    emitPoint();
    return;
  }
  if (level == 0 && parallelDepth_ > 1) {
    emitCountedLoop(beginArgument_, endArgument_, 1, [&](llvm::Value *flat) {
      for (size_t inner = parallelDepth_ - 1; inner > 0; --inner) {
        llvm::Value *range = builder_.getInt64(kernel_.outerRanges[inner]);
        vars_[inner] = builder_.CreateURem(flat, range);
        flat = builder_.CreateUDiv(flat, range);
      }
      vars_[0] = flat;
      emitOuter(parallelDepth_);
    });
    return;
  }
  llvm::Value *start = level == 0 ? beginArgument_ : builder_.getInt64(0);
  llvm::Value *end =
      level == 0 ? endArgument_ : builder_.getInt64(kernel_.outerRanges[level]);
  if (strategy_ == VectorStrategy::Outer &&
      level + 1 == kernel_.outerRanges.size()) {
    llvm::Value *from =
        streamedStore_ ? emitAlignmentPeel(level, start, end) : start;
    for (int width : vectorWidths()) {
      llvm::Value *split = vectorEnd(builder_, from, end, width);
      emitCountedLoop(from, split, width, [&](llvm::Value *index) {
        vars_[level] = index;
        enterVector(static_cast<int64_t>(level), width);
        emitPoint();
        leaveVector();
      });
      from = split;
    }
    emitCountedLoop(from, end, 1, [&](llvm::Value *index) {
      vars_[level] = index;
      emitPoint();
    });
    return;
  }
  emitCountedLoop(start, end, 1, [&](llvm::Value *index) {
    vars_[level] = index;
    emitOuter(level + 1);
  });
}

// Scalar points from `start` until the streamed store's address is a
// multiple of the vector's bytes, so that the vector loops after it store
// aligned (all of [start, end) where the address is not a multiple of the
// element's size). Returns where the vector loops start.
llvm::Value *KernelEmitter::emitAlignmentPeel(size_t level, llvm::Value *start,
                                              llvm::Value *end) {
  llvm::Value *aligned = alignedStart(level, start, end);
  emitCountedLoop(start, aligned, 1, [&](llvm::Value *position) {
    vars_[level] = position;
    emitPoint();
  });
  return aligned;
}

// The first index in [start, end) of variable `var` at which the streamed
// store's address is a multiple of the vector's bytes (`end` where the
// address is not a multiple of the element's size).
llvm::Value *KernelEmitter::alignedStart(size_t var, llvm::Value *start,
                                         llvm::Value *end) {
  DType dtype = program_.buffers.at(streamedStore_->buffer).dtype();
  int64_t size = itemSize(dtype);
  scopes_.emplace_back();
  llvm::Value *saved = vars_[var];
  vars_[var] = start;
  llvm::Value *index = emit(streamedStore_->index, false);
  vars_[var] = saved;
  scopes_.pop_back();
  llvm::Value *address = builder_.CreatePtrToInt(
      builder_.CreateGEP(storageType(dtype),
                         bufferPointer(streamedStore_->buffer), index),
      builder_.getInt64Ty());
  llvm::Value *toBoundary = builder_.CreateAnd(
      builder_.CreateNeg(address), builder_.getInt64(streamAlignment_ - 1));
  llvm::Value *count = builder_.CreateSub(end, start);
  llvm::Value *peel = builder_.CreateSelect(
      builder_.CreateICmpEQ(
          builder_.CreateAnd(address, builder_.getInt64(size - 1)),
          builder_.getInt64(0)),
      builder_.CreateUDiv(toBoundary, builder_.getInt64(size)), count);
  peel = builder_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, peel, count);
  return builder_.CreateAdd(start, peel);
}

void KernelEmitter::emitPoint() {
  reductionValues_.assign(static_cast<size_t>(kernel_.reductionCount()),
                          nullptr);
  varyingMemo_.clear();
  size_t reductionBase = 0;
  for (size_t loopIndex = 0; loopIndex < kernel_.loops.size(); ++loopIndex) {
    emitLoopNest(loopIndex, reductionBase);
    reductionBase += kernel_.loops[loopIndex].reductions.size();
  }
}

bool KernelEmitter::isFloatSum(const loop::Reduction &reduction) {
  return reduction.op == ReduceOp::Sum &&
         isFloatingPoint(reduction.value->dtype());
}

// The dtype a reduction accumulates in.
DType accumulatorDType(const loop::Reduction &reduction) {
  if (reduction.op == ReduceOp::Any || reduction.op == ReduceOp::All)
    return DType::Bool;
  return reduction.value->dtype();
}

llvm::Value *KernelEmitter::identity(ReduceOp op, DType dtype, int lanes) {
  llvm::Type *type = withLanes(computeType(dtype), lanes);
  bool isFloat = isFloatingPoint(dtype);
  auto integerLimit = [&](bool maximum) -> llvm::Constant * {
    unsigned bits = type->getScalarSizeInBits();
    llvm::APInt value = isUnsignedType(dtype)
                            ? (maximum ? llvm::APInt::getMaxValue(bits)
                                       : llvm::APInt::getMinValue(bits))
                            : (maximum ? llvm::APInt::getSignedMaxValue(bits)
                                       : llvm::APInt::getSignedMinValue(bits));
    return llvm::ConstantInt::get(type, value);
  };
  switch (op) {
  case ReduceOp::Sum:
  case ReduceOp::Any:
    return llvm::Constant::getNullValue(type);
  case ReduceOp::Prod:
  case ReduceOp::All:
    return isFloat ? llvm::ConstantFP::get(type, 1.0)
                   : llvm::ConstantInt::get(type, 1);
  case ReduceOp::Max:
  case ReduceOp::ArgMax:
    return isFloat ? llvm::ConstantFP::getInfinity(type, true)
                   : integerLimit(false);
  case ReduceOp::Min:
  case ReduceOp::ArgMin:
    return isFloat ? llvm::ConstantFP::getInfinity(type, false)
                   : integerLimit(true);
  }
  throw Error("loop IR: unknown reduction");
}

llvm::Value *KernelEmitter::combine(ReduceOp op, DType dtype, llvm::Value *a,
                                    llvm::Value *b) {
  bool isFloat = isFloatingPoint(dtype);
  bool isBool = dtype == DType::Bool;
  switch (op) {
  case ReduceOp::Sum:
    return isFloat  ? builder_.CreateFAdd(a, b)
           : isBool ? builder_.CreateOr(a, b)
                    : builder_.CreateAdd(a, b);
  case ReduceOp::Prod:
    return isFloat  ? builder_.CreateFMul(a, b)
           : isBool ? builder_.CreateAnd(a, b)
                    : builder_.CreateMul(a, b);
  case ReduceOp::Max:
  case ReduceOp::Min: {
    bool maximum = op == ReduceOp::Max;
    if (isFloat) // NaN wins: keep `a` when it is NaN or beyond `b`.
      return builder_.CreateSelect(
          builder_.CreateOr(maximum ? builder_.CreateFCmpOGT(a, b)
                                    : builder_.CreateFCmpOLT(a, b),
                            builder_.CreateFCmpUNO(a, a)),
          a, b);
    llvm::Intrinsic::ID id =
        isUnsignedType(dtype)
            ? (maximum ? llvm::Intrinsic::umax : llvm::Intrinsic::umin)
            : (maximum ? llvm::Intrinsic::smax : llvm::Intrinsic::smin);
    return callIntrinsic(id, {a, b});
  }
  case ReduceOp::Any:
    return builder_.CreateOr(a, b);
  case ReduceOp::All:
    return builder_.CreateAnd(a, b);
  default:
    throw Error("loop IR: arg reductions combine through combineArg");
  }
}

std::pair<llvm::Value *, llvm::Value *>
KernelEmitter::combineArg(ReduceOp op, DType dtype, llvm::Value *valueA,
                          llvm::Value *indexA, llvm::Value *valueB,
                          llvm::Value *indexB) {
  // B wins when it is beyond A, or equal to A (both NaN counts as equal) at
  // an earlier position; a NaN is beyond everything but NaN.
  bool maximum = op == ReduceOp::ArgMax;
  llvm::Value *earlier = builder_.CreateICmpSLT(indexB, indexA);
  llvm::Value *takeB;
  if (isFloatingPoint(dtype)) {
    llvm::Value *nanA = builder_.CreateFCmpUNO(valueA, valueA);
    llvm::Value *nanB = builder_.CreateFCmpUNO(valueB, valueB);
    llvm::Value *beyond = maximum ? builder_.CreateFCmpOGT(valueB, valueA)
                                  : builder_.CreateFCmpOLT(valueB, valueA);
    llvm::Value *equal = builder_.CreateOr(
        builder_.CreateFCmpOEQ(valueB, valueA), builder_.CreateAnd(nanA, nanB));
    llvm::Value *notNanA = builder_.CreateNot(nanA);
    takeB = builder_.CreateOr(
        builder_.CreateOr(builder_.CreateAnd(nanB, notNanA),
                          builder_.CreateAnd(notNanA, beyond)),
        builder_.CreateAnd(equal, earlier));
  } else {
    bool isUnsigned = isUnsignedType(dtype);
    llvm::Value *beyond =
        maximum ? (isUnsigned ? builder_.CreateICmpUGT(valueB, valueA)
                              : builder_.CreateICmpSGT(valueB, valueA))
                : (isUnsigned ? builder_.CreateICmpULT(valueB, valueA)
                              : builder_.CreateICmpSLT(valueB, valueA));
    takeB = builder_.CreateOr(
        beyond,
        builder_.CreateAnd(builder_.CreateICmpEQ(valueB, valueA), earlier));
  }
  return {builder_.CreateSelect(takeB, valueB, valueA),
          builder_.CreateSelect(takeB, indexB, indexA)};
}

std::vector<Accumulator> KernelEmitter::makeAccumulators(const loop::Loop &loop,
                                                         int lanes) {
  llvm::IRBuilder<> entryBuilder(entry_, entry_->begin());
  std::vector<Accumulator> accumulators;
  for (const loop::Reduction &reduction : loop.reductions) {
    DType dtype = accumulatorDType(reduction);
    llvm::Type *type = withLanes(computeType(dtype), lanes);
    Accumulator acc;
    acc.lanes = lanes;
    acc.value = entryBuilder.CreateAlloca(type);
    builder_.CreateStore(identity(reduction.op, dtype, lanes), acc.value);
    if (reduction.op == ReduceOp::ArgMax || reduction.op == ReduceOp::ArgMin) {
      llvm::Type *indexType = withLanes(builder_.getInt64Ty(), lanes);
      acc.index = entryBuilder.CreateAlloca(indexType);
      builder_.CreateStore(llvm::ConstantInt::get(
                               indexType, std::numeric_limits<int64_t>::max()),
                           acc.index);
    }
    if (isFloatSum(reduction)) {
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

void KernelEmitter::accumulate(const loop::Loop &loop,
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
      auto [bestValue, bestIndex] =
          combineArg(reduction.op, dtype, builder_.CreateLoad(type, acc.value),
                     builder_.CreateLoad(indexType, acc.index), value,
                     splat(position, acc.lanes));
      builder_.CreateStore(bestValue, acc.value);
      builder_.CreateStore(bestIndex, acc.index);
      continue;
    }
    llvm::AllocaInst *target = acc.partial ? acc.partial : acc.value;
    builder_.CreateStore(
        combine(reduction.op, dtype, builder_.CreateLoad(type, target), value),
        target);
  }
}

void KernelEmitter::resetPartials(const loop::Loop &loop,
                                  std::vector<Accumulator> &accs) {
  for (size_t index = 0; index < loop.reductions.size(); ++index)
    if (accs[index].partial)
      builder_.CreateStore(
          llvm::Constant::getNullValue(accs[index].partial->getAllocatedType()),
          accs[index].partial);
}

void KernelEmitter::foldPartials(const loop::Loop &loop,
                                 std::vector<Accumulator> &accs) {
  // Kahan summation of the block sums keeps long sums accurate.
  for (size_t index = 0; index < loop.reductions.size(); ++index) {
    Accumulator &acc = accs[index];
    if (!acc.partial)
      continue;
    llvm::Type *type = acc.value->getAllocatedType();
    llvm::Value *total = builder_.CreateLoad(type, acc.value);
    llvm::Value *corrected =
        builder_.CreateFSub(builder_.CreateLoad(type, acc.partial),
                            builder_.CreateLoad(type, acc.compensation));
    llvm::Value *sum = builder_.CreateFAdd(total, corrected);
    // Once the sum is infinite (an inf input, or float overflow) or NaN, its
    // error term would be inf - inf: it is zero then, so that the sum ends
    // as eager's does (inf, not NaN).
    llvm::Value *error =
        builder_.CreateFSub(builder_.CreateFSub(sum, total), corrected);
    llvm::Value *finite = builder_.CreateFCmpOLT(
        callIntrinsic(llvm::Intrinsic::fabs, {sum}),
        floatLike(sum, std::numeric_limits<double>::infinity()));
    builder_.CreateStore(builder_.CreateSelect(
                             finite, error, llvm::Constant::getNullValue(type)),
                         acc.compensation);
    builder_.CreateStore(sum, acc.value);
  }
}

std::pair<llvm::Value *, llvm::Value *>
KernelEmitter::finalValue(const Accumulator &acc) {
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

// Combines the upper half of a vector accumulator's lanes into the lower
// half until `lanes` remain.
std::pair<llvm::Value *, llvm::Value *>
KernelEmitter::narrowLanes(ReduceOp op, DType dtype, llvm::Value *value,
                           llvm::Value *position, int lanes) {
  bool isArg = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
  while (lanesOf(value) > lanes) {
    int half = lanesOf(value) / 2;
    std::vector<int> low, high;
    for (int lane = 0; lane < half; ++lane) {
      low.push_back(lane);
      high.push_back(half + lane);
    }
    auto part = [&](llvm::Value *whole, const std::vector<int> &mask) {
      return builder_.CreateShuffleVector(whole, mask);
    };
    if (isArg) {
      std::tie(value, position) =
          combineArg(op, dtype, part(value, low), part(position, low),
                     part(value, high), part(position, high));
    } else {
      value = combine(op, dtype, part(value, low), part(value, high));
    }
  }
  return {value, position};
}

void KernelEmitter::emitLoopNest(size_t loopIndex, size_t reductionBase) {
  const loop::Loop &loop = kernel_.loops[loopIndex];
  size_t depth = loop.ranges.size();
  if (depth == 0) {
    scopes_.emplace_back();
    bool vector = currentLanes_ > 1;
    for (size_t index = 0; index < loop.reductions.size(); ++index) {
      const loop::Reduction &reduction = loop.reductions[index];
      llvm::Value *value;
      if (reduction.op == ReduceOp::ArgMax || reduction.op == ReduceOp::ArgMin)
        value = splat(builder_.getInt64(0), currentLanes_);
      else
        value = emitCast(emit(reduction.value, vector),
                         reduction.value->dtype(), accumulatorDType(reduction));
      reductionValues_[reductionBase + index] = value;
    }
    emitStores(loop.stores);
    scopes_.pop_back();
    varyingMemo_.clear();
    return;
  }
  bool innerVector = strategy_ == VectorStrategy::Inner && currentLanes_ == 1 &&
                     innerVectorLoop_[loopIndex];
  std::vector<Accumulator> pointAccs = makeAccumulators(loop, currentLanes_);
  bool blocked = false;
  for (const loop::Reduction &reduction : loop.reductions)
    blocked = blocked || isFloatSum(reduction);
  int64_t firstVar = outerCount_;
  int64_t lastVar = outerCount_ + static_cast<int64_t>(depth) - 1;
  int64_t innermostRange = loop.ranges.back();
  int64_t block = kSumBlockPerLane * (innerVector ? lanes_ * unroll_ : 1);
  // Where every span is the whole innermost range, only the vector widths
  // and the scalar tail that some point of it takes are emitted (a range of
  // 64 is two wide steps and nothing else).
  bool streaming = innerVector && streamedStore_ && streamedLoop_ == loopIndex;
  bool wholeSpans = (!blocked || innermostRange <= block) && !streaming;
  int64_t leftOver = innermostRange;
  // One set of accumulators per vector width, widest first.
  std::vector<int> widths;
  if (innerVector) {
    for (int width : vectorWidths()) {
      if (wholeSpans && leftOver < width)
        continue;
      widths.push_back(width);
      leftOver %= width;
    }
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
          builder_.CreateMul(outerPosition, builder_.getInt64(innermostRange)),
          index);
    };
    auto scalarPoints = [&](llvm::Value *from, llvm::Value *to) {
      emitCountedLoop(from, to, 1, [&](llvm::Value *index) {
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
      emitCountedLoop(from, split, width, [&](llvm::Value *index) {
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
  std::function<void(size_t, llvm::Value *)> level =
      [&](size_t dimension, llvm::Value *outerPosition) {
        if (dimension + 1 < depth) {
          emitCountedLoop(
              builder_.getInt64(0), builder_.getInt64(loop.ranges[dimension]),
              1, [&](llvm::Value *index) {
                vars_[firstVar + dimension] = index;
                level(dimension + 1,
                      builder_.CreateAdd(
                          builder_.CreateMul(
                              outerPosition,
                              builder_.getInt64(loop.ranges[dimension])),
                          index));
              });
          return;
        }
        if (!blocked) {
          span(builder_.getInt64(0), builder_.getInt64(innermostRange),
               outerPosition);
          return;
        }
        emitCountedLoop(
            builder_.getInt64(0), builder_.getInt64(innermostRange), block,
            [&](llvm::Value *blockStart) {
              resetPartials(loop, pointAccs);
              for (std::vector<Accumulator> &accs : vectorAccs)
                resetPartials(loop, accs);
              llvm::Value *blockEnd = builder_.CreateBinaryIntrinsic(
                  llvm::Intrinsic::smin,
                  builder_.CreateAdd(blockStart, builder_.getInt64(block)),
                  builder_.getInt64(innermostRange));
              span(blockStart, blockEnd, outerPosition);
              foldPartials(loop, pointAccs);
              for (std::vector<Accumulator> &accs : vectorAccs)
                foldPartials(loop, accs);
            });
      };
  level(0, builder_.getInt64(0));
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
            narrowLanes(reduction.op, dtype, lanesValue, lanesPosition,
                        lanesOf(widthValue));
        if (isArg)
          std::tie(lanesValue, lanesPosition) =
              combineArg(reduction.op, dtype, lanesValue, lanesPosition,
                         widthValue, widthPosition);
        else
          lanesValue = combine(reduction.op, dtype, lanesValue, widthValue);
      } else {
        lanesValue = widthValue;
        lanesPosition = widthPosition;
      }
    }
    if (lanesValue) {
      std::tie(lanesValue, lanesPosition) =
          narrowLanes(reduction.op, dtype, lanesValue, lanesPosition, 1);
      llvm::Value *laneValue =
          builder_.CreateExtractElement(lanesValue, uint64_t(0));
      if (isArg)
        std::tie(value, position) = combineArg(
            reduction.op, dtype, value, position, laneValue,
            builder_.CreateExtractElement(lanesPosition, uint64_t(0)));
      else
        value = combine(reduction.op, dtype, value, laneValue);
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

// Carrying pays for values with a math-library call, in kernels that
// handle one outer point at a time, between loops over the same ranges of
// at most kMaxCarried points, when no loop from the producer to the consumer
// stores to a buffer the value reads.
constexpr int64_t kMaxCarried = 16384;

void KernelEmitter::planCarried() {
  carried_.clear();
  if (strategy_ == VectorStrategy::Outer)
    return;
  // Whether a value calls the math library outside its loads' indices.
  std::unordered_map<const Expr *, bool> expensiveMemo;
  std::function<bool(const Expr *)> expensive = [&](const Expr *node) {
    auto found = expensiveMemo.find(node);
    if (found != expensiveMemo.end())
      return found->second;
    bool result = false;
    if (node->kind() == ExprKind::Unary &&
        mathFunctionName(node->unaryOp()) != nullptr)
      result = true;
    else if (node->kind() != ExprKind::Load)
      for (const Expr *operand : node->operands())
        result = result || expensive(operand);
    expensiveMemo[node] = result;
    return result;
  };
  auto nodesOf = [](const loop::Loop &loop) {
    std::unordered_set<const Expr *> nodes;
    std::function<void(const Expr *)> visit = [&](const Expr *node) {
      if (!nodes.insert(node).second)
        return;
      for (const Expr *operand : node->operands())
        visit(operand);
    };
    for (const loop::Reduction &reduction : loop.reductions)
      visit(reduction.value);
    for (const loop::Store &store : loop.stores)
      visit(store.value);
    return nodes;
  };
  auto storesTo = [&](size_t from, size_t to, const Expr *value) {
    std::unordered_set<int64_t> written;
    for (size_t index = from; index <= to; ++index)
      for (const loop::Store &store : kernel_.loops[index].stores)
        written.insert(store.buffer);
    for (const Expr *load : loop::loadsOf(value))
      if (written.count(load->id()))
        return true;
    return false;
  };
  for (size_t producer = 0; producer < kernel_.loops.size(); ++producer) {
    const loop::Loop &loop = kernel_.loops[producer];
    int64_t points = numelOf(loop.ranges);
    if (loop.ranges.empty() || points > kMaxCarried || points < 1)
      continue;
    int64_t lastVar =
        outerCount_ + static_cast<int64_t>(loop.ranges.size()) - 1;
    // The largest expensive subexpressions of the producer's reductions.
    std::vector<const Expr *> candidates;
    std::unordered_set<const Expr *> seen;
    std::function<void(const Expr *)> collect = [&](const Expr *node) {
      if (!seen.insert(node).second || node->kind() == ExprKind::Load ||
          !loop::dependsOnVar(node, lastVar) || !expensive(node))
        return;
      // Stack arrays hold floats only (a Bool's i1 has no byte layout).
      if (isFloatingPoint(node->dtype()))
        candidates.push_back(node);
      for (const Expr *operand : node->operands())
        collect(operand);
    };
    for (const loop::Reduction &reduction : loop.reductions)
      collect(reduction.value);
    if (candidates.empty())
      continue;
    for (size_t consumer = producer + 1; consumer < kernel_.loops.size();
         ++consumer) {
      if (kernel_.loops[consumer].ranges != loop.ranges)
        continue;
      std::unordered_set<const Expr *> used = nodesOf(kernel_.loops[consumer]);
      for (const Expr *candidate : candidates) {
        if (!used.count(candidate) || storesTo(producer, consumer, candidate))
          continue;
        auto [entry, inserted] = carried_.try_emplace(candidate);
        if (inserted)
          entry->second.producer = producer;
        if (entry->second.producer == producer)
          entry->second.consumers.push_back(consumer);
      }
    }
  }
  // Keep only the outermost carried expressions of each consumer: an inner
  // one is needed only where its outer one is not carried.
  std::vector<const Expr *> redundant;
  for (auto &[expr, carried] : carried_) {
    std::unordered_set<const Expr *> visited;
    std::function<void(const Expr *)> mark = [&](const Expr *node) {
      if (!visited.insert(node).second)
        return;
      auto found = carried_.find(node);
      if (node != expr && found != carried_.end() &&
          found->second.consumers == carried.consumers &&
          found->second.producer == carried.producer)
        redundant.push_back(node);
      for (const Expr *child : node->operands())
        mark(child);
    };
    mark(expr);
  }
  for (const Expr *expr : redundant)
    carried_.erase(expr);
  llvm::IRBuilder<> entryBuilder(entry_, entry_->begin());
  for (auto &[expr, carried] : carried_) {
    int64_t points = numelOf(kernel_.loops[carried.producer].ranges);
    carried.scratch = entryBuilder.CreateAlloca(
        computeType(expr->dtype()), entryBuilder.getInt64(points), "carried");
    carried.scratch->setAlignment(llvm::Align(64));
  }
}

// The carried value's slot at the current point of a consumer (load) or of
// its producer (store); nullptr elsewhere.
llvm::Value *KernelEmitter::carriedSlot(const Expr *expr, bool producer) {
  auto found = carried_.find(expr);
  if (found == carried_.end() || !loopPosition_)
    return nullptr;
  const Carried &carried = found->second;
  bool here =
      producer ? carried.producer == currentLoop_
               : std::find(carried.consumers.begin(), carried.consumers.end(),
                           currentLoop_) != carried.consumers.end();
  if (!here)
    return nullptr;
  return builder_.CreateGEP(carried.scratch->getAllocatedType(),
                            carried.scratch, loopPosition_);
}

llvm::Value *KernelEmitter::loadCarried(const Expr *expr, bool vector) {
  llvm::Value *address = carriedSlot(expr, false);
  if (!address)
    return nullptr;
  llvm::Type *element = computeType(expr->dtype());
  return builder_.CreateAlignedLoad(
      withLanes(element, vector ? currentLanes_ : 1), address,
      llvm::Align(element->getScalarSizeInBits() / 8));
}

void KernelEmitter::storeCarried(const Expr *expr, llvm::Value *value) {
  if (llvm::Value *address = carriedSlot(expr, true))
    builder_.CreateAlignedStore(
        value, address,
        llvm::Align(value->getType()->getScalarSizeInBits() / 8));
}

EmittedKernel KernelEmitter::emit(const std::string &name) {
  chooseStrategy();
  llvm::Type *pointer = builder_.getPtrTy();
  auto *type = llvm::FunctionType::get(
      builder_.getVoidTy(),
      {pointer, builder_.getInt64Ty(), builder_.getInt64Ty()}, false);
  function_ = llvm::Function::Create(type, llvm::Function::ExternalLinkage,
                                     name, module_);
  function_->addFnAttr("target-cpu", host_.cpuName);
  function_->addFnAttr("target-features", host_.features);
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
  planCarried();
  planStreaming();
  planParallel();
  emitOuter(0);
  // Non-temporal stores are weakly ordered: fence them before the thread
  // that waits for this one reads the output.
  if (streamedStore_)
    builder_.CreateIntrinsic(llvm::Intrinsic::x86_sse_sfence, {}, {});
  builder_.CreateRetVoid();
  return {function_, strategy_, lanes_, unroll_, slots_, parallelDepth_};
}

} // namespace

EmittedKernel emitKernel(llvm::Module &module, const loop::Program &program,
                         const loop::Kernel &kernel, const std::string &name,
                         const HostTarget &host, const MathLibrary &math) {
  KernelEmitter emitter(module, program, kernel, host, math);
  return emitter.emit(name);
}

} // namespace kiln::backend
