// The NVPTX kernel emitter: the shared expression emitter with the GPU's
// hooks (kernel parameters as buffer addresses, libdevice math) and the GPU
// schedule's mapping: the lanes of an outer point share each of its loops,
// their partial reductions (compensated float sums per lane) combine by
// warp shuffles, then through shared memory across the warps of a block.
// Depends on backend/nvptx/NvptxKernelEmitter.h, backend/llvm/, ir/, LLVM.
#include "backend/nvptx/NvptxKernelEmitter.h"

#include "backend/llvm/ExprEmitter.h"
#include "backend/llvm/LoopEmitter.h"
#include "backend/llvm/ReductionAlgebra.h"
#include "ir/Error.h"

#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Module.h>

#include <limits>
#include <tuple>
#include <unordered_set>

namespace kiln::backend {

namespace {

using loop::Expr;
using loop::ReduceOp;
using loop::UnaryOp;

struct Accumulator {
  llvm::AllocaInst *value = nullptr;
  llvm::AllocaInst *index = nullptr;        // ArgMax/ArgMin
  llvm::AllocaInst *compensation = nullptr; // float sums (Kahan)
};

class NvptxKernelEmitter : public ExprEmitter {
public:
  NvptxKernelEmitter(llvm::Module &module, const loop::Program &program,
                     const loop::Kernel &kernel,
                     const GpuKernelSchedule &schedule)
      : ExprEmitter(module, program, "the GPU code generator"), kernel_(kernel),
        schedule_(schedule), algebra_(*this) {}

  NvptxKernel emitFunction(const std::string &name);

protected:
  llvm::Value *bufferPointer(int64_t buffer) override;
  llvm::Value *callMath(const char *name,
                        std::vector<llvm::Value *> args) override;
  /// Kept rows: a value computed at a lane's j-th position of one loop is
  /// the value at that position in the kernel's later loops.
  llvm::Value *reuse(const Expr *expr, bool vector) override;
  void computed(const Expr *expr, llvm::Value *value) override;

private:
  void emitPoint();
  void emitLoop(size_t loopIndex, size_t reductionBase);
  /// `value` combined with its copies in the point's other lanes of the
  /// warp (butterfly shuffles): each of them ends with the warp's result.
  std::pair<llvm::Value *, llvm::Value *>
  combineAcrossWarp(const loop::Reduction &reduction, DType dtype,
                    llvm::Value *value, llvm::Value *position);
  llvm::Value *shuffleXor(llvm::Value *value, unsigned offset);
  /// The warps' partial results of one loop's reductions combined through
  /// shared memory: every lane ends with the point's results.
  void combineAcrossWarps(const loop::Loop &loop,
                          std::vector<llvm::Value *> &values,
                          std::vector<llvm::Value *> &positions);
  /// Word `word` of the shared partials.
  llvm::Value *sharedSlot(llvm::Value *word);
  /// `then` emitted where `condition` holds.
  void emitIf(llvm::Value *condition, const char *name,
              llvm::function_ref<void()> then);
  void emitStores(const std::vector<loop::Store> &stores);
  llvm::Value *readSpecialRegister(llvm::Intrinsic::ID id);
  /// The positions each lane takes in every loop of a kept-row kernel
  /// (0: the loops run as counted loops).
  int64_t keptRowPositions() const;
  /// Sets vars_[first..] to the row-major position `flat` in `ranges` (the
  /// last varies fastest).
  void placeVars(llvm::Value *flat, const loop::Ranges &ranges, size_t first);
  /// Whether `expr` reads a buffer this kernel stores to (its value may
  /// then change between loops).
  bool readsStoredBuffer(const Expr *expr);

  const loop::Kernel &kernel_;
  const GpuKernelSchedule &schedule_;
  ReductionAlgebra algebra_;
  llvm::Function *function_ = nullptr;
  llvm::BasicBlock *entry_ = nullptr;
  std::vector<int64_t> parameterBuffers_;
  llvm::Value *lane_ = nullptr; // this thread's lane of its point
  llvm::Value *pointInBlock_ = nullptr;
  /// Mappings with barriers run every thread of a block to the end (a
  /// barrier waits for all of them); those past the last point run with
  /// `valid_` false: no loop points, no stores.
  llvm::Value *valid_ = nullptr;
  /// Shared memory for partial results: two areas of `sharedWords_`, which
  /// loops with reductions take in turn (a loop writes its area while the
  /// lanes may still read the other; the barrier between makes it safe).
  llvm::GlobalVariable *shared_ = nullptr;
  int64_t sharedWords_ = 0;
  size_t reducingLoops_ = 0;
  std::unordered_map<int64_t, llvm::Value *> pointers_;
  /// Kept rows (keptRowPositions): the lane's position being emitted (-1:
  /// none), the values computed at each position outside conditional code
  /// (there they dominate the later loops), the buffers the kernel stores.
  int64_t keptPositions_ = 0; // keptRowPositions(), once lanes are known
  int64_t position_ = -1;
  int conditional_ = 0;
  std::vector<std::unordered_map<const Expr *, llvm::Value *>> kept_;
  std::unordered_set<int64_t> storedBuffers_;
  std::unordered_map<const Expr *, bool> readsStored_;
};

// A lane keeps at most this many positions of a row in registers.
constexpr int64_t kMaxKeptPositions = 32;
// ...and a block at most this many positions across its lanes (a block of
// 1024 threads has 64 registers a thread).
constexpr int64_t kMaxKeptBlockPositions = 16384;

int64_t NvptxKernelEmitter::keptRowPositions() const {
  if (!lane_ || schedule_.pointsInnermost())
    return 0;
  const loop::Ranges *ranges = nullptr;
  size_t rowLoops = 0;
  for (const loop::Loop &loop : kernel_.loops) {
    if (loop.ranges.empty())
      continue;
    // Every loop walks the same positions: a position's variables are the
    // same in each, so are the values computed from them.
    if (!loop.ranges.isStatic() || (ranges && loop.ranges != *ranges))
      return 0;
    ranges = &loop.ranges;
    ++rowLoops;
  }
  if (rowLoops < 2)
    return 0;
  int64_t total = numelOf(ranges->constants());
  int64_t lanes = schedule_.lanesPerPoint;
  int64_t positions = total / lanes;
  if (total % lanes != 0 || positions < 1 || positions > kMaxKeptPositions ||
      positions * schedule_.block > kMaxKeptBlockPositions * lanes)
    return 0;
  return positions;
}

void NvptxKernelEmitter::placeVars(llvm::Value *flat,
                                   const loop::Ranges &ranges, size_t first) {
  llvm::Value *rest = flat;
  for (size_t d = ranges.size(); d-- > 0;) {
    llvm::Value *range = sizeValue(ranges[d]);
    vars_[first + d] = d == 0 ? rest : builder_.CreateURem(rest, range);
    if (d > 0)
      rest = builder_.CreateUDiv(rest, range);
  }
}

bool NvptxKernelEmitter::readsStoredBuffer(const Expr *expr) {
  auto found = readsStored_.find(expr);
  if (found != readsStored_.end())
    return found->second;
  bool reads =
      expr->kind() == loop::ExprKind::Load && storedBuffers_.count(expr->id());
  for (const Expr *operand : expr->operands())
    reads = reads || readsStoredBuffer(operand);
  return readsStored_[expr] = reads;
}

llvm::Value *NvptxKernelEmitter::reuse(const Expr *expr, bool) {
  if (position_ < 0)
    return nullptr;
  auto found = kept_[position_].find(expr);
  return found == kept_[position_].end() ? nullptr : found->second;
}

void NvptxKernelEmitter::computed(const Expr *expr, llvm::Value *value) {
  if (position_ >= 0 && conditional_ == 0 && !readsStoredBuffer(expr))
    kept_[position_][expr] = value;
}

// Every buffer the kernel reads or writes, in a fixed order, is a
// parameter: the function's type is known before its body is emitted.
std::vector<int64_t> buffersOf(const loop::Kernel &kernel) {
  std::vector<int64_t> buffers;
  auto add = [&](int64_t buffer) {
    if (std::find(buffers.begin(), buffers.end(), buffer) == buffers.end())
      buffers.push_back(buffer);
  };
  for (const loop::Loop &loop : kernel.loops) {
    loop::forEachExpr(loop, [&](const Expr *expr) {
      for (const Expr *load : loop::loadsOf(expr))
        add(load->id());
    });
    for (const loop::Store &store : loop.stores)
      add(store.buffer);
  }
  return buffers;
}

llvm::Value *NvptxKernelEmitter::bufferPointer(int64_t buffer) {
  auto found = pointers_.find(buffer);
  if (found == pointers_.end())
    throw Error("GPU kernel " + kernel_.name + " uses buffer " +
                std::to_string(buffer) + " it has no parameter for");
  return found->second;
}

// libdevice's functions: __nv_<name>f for float, __nv_<name> for double.
llvm::Value *NvptxKernelEmitter::callMath(const char *name,
                                          std::vector<llvm::Value *> args) {
  llvm::Type *type = args[0]->getType();
  if (type->isVectorTy())
    throw Error("the GPU code generator has no vector math");
  bool isFloat = type->isFloatTy();
  std::string function = std::string("__nv_") + name + (isFloat ? "f" : "");
  std::vector<llvm::Type *> types(args.size(), type);
  llvm::FunctionCallee callee = module_.getOrInsertFunction(
      function, llvm::FunctionType::get(type, types, false));
  return builder_.CreateCall(callee, args);
}

llvm::Value *NvptxKernelEmitter::readSpecialRegister(llvm::Intrinsic::ID id) {
  return builder_.CreateZExt(builder_.CreateIntrinsic(id, {}, {}),
                             builder_.getInt64Ty());
}

void NvptxKernelEmitter::emitIf(llvm::Value *condition, const char *name,
                                llvm::function_ref<void()> then) {
  llvm::BasicBlock *body = llvm::BasicBlock::Create(context_, name, function_);
  llvm::BasicBlock *after =
      llvm::BasicBlock::Create(context_, "endif", function_);
  builder_.CreateCondBr(condition, body, after);
  builder_.SetInsertPoint(body);
  ++conditional_;
  then();
  --conditional_;
  builder_.CreateBr(after);
  builder_.SetInsertPoint(after);
}

NvptxKernel NvptxKernelEmitter::emitFunction(const std::string &name) {
  parameterBuffers_ = buffersOf(kernel_);
  for (const loop::Loop &loop : kernel_.loops)
    for (const loop::Store &store : loop.stores)
      storedBuffers_.insert(store.buffer);
  std::vector<llvm::Type *> parameters(parameterBuffers_.size(),
                                       builder_.getPtrTy());
  auto *type = llvm::FunctionType::get(builder_.getVoidTy(), parameters, false);
  function_ = llvm::Function::Create(type, llvm::Function::ExternalLinkage,
                                     name, module_);
  function_->setCallingConv(llvm::CallingConv::PTX_Kernel);
  entry_ = llvm::BasicBlock::Create(context_, "entry", function_);
  builder_.SetInsertPoint(entry_);
  for (size_t i = 0; i < parameterBuffers_.size(); ++i) {
    function_->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::NoUndef);
    pointers_[parameterBuffers_[i]] =
        function_->getArg(static_cast<unsigned>(i));
  }

  // This thread's outer point and lane within its block.
  llvm::Value *thread =
      readSpecialRegister(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
  llvm::Value *blockIndex =
      readSpecialRegister(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
  llvm::Value *lanes = builder_.getInt64(schedule_.lanesPerPoint);
  llvm::Value *width = builder_.getInt64(schedule_.pointsPerBlock);
  pointInBlock_ = thread;
  if (schedule_.lanesPerPoint > 1 && schedule_.pointsInnermost()) {
    pointInBlock_ = builder_.CreateURem(thread, width);
    lane_ = builder_.CreateUDiv(thread, width);
  } else if (schedule_.lanesPerPoint > 1) {
    lane_ = builder_.CreateURem(thread, lanes);
    pointInBlock_ = builder_.CreateUDiv(thread, lanes);
  }
  llvm::Value *point =
      builder_.CreateAdd(builder_.CreateMul(blockIndex, width), pointInBlock_);
  llvm::Value *inRange =
      builder_.CreateICmpULT(point, sizeValue(schedule_.points));
  llvm::BasicBlock *done =
      llvm::BasicBlock::Create(context_, "done", function_);
  bool barriers = schedule_.partialsPerPoint() > 1;
  if (barriers || (lane_ && schedule_.pointsInnermost())) {
    // Every thread reaches every barrier and every shuffle (a warp of a
    // column mapping holds several points): those past the last point
    // compute at point 0 (addresses stay inside the buffers) with `valid_`
    // false.
    valid_ = inRange;
    point = builder_.CreateSelect(valid_, point, builder_.getInt64(0));
  }
  if (barriers) {
    for (const loop::Loop &loop : kernel_.loops)
      sharedWords_ = std::max(sharedWords_, sharedWordsOfLoop(loop, schedule_));
    auto *type = llvm::ArrayType::get(builder_.getInt64Ty(),
                                      static_cast<uint64_t>(2 * sharedWords_));
    shared_ = new llvm::GlobalVariable(
        module_, type, false, llvm::GlobalValue::InternalLinkage,
        llvm::UndefValue::get(type), name + "_partials", nullptr,
        llvm::GlobalValue::NotThreadLocal, /*AddressSpace=*/3);
    shared_->setAlignment(llvm::Align(8));
  }
  size_t outer = kernel_.outerRanges.size();
  size_t variables = outer;
  for (const loop::Loop &loop : kernel_.loops)
    variables = std::max(variables, outer + loop.ranges.size());
  vars_.assign(variables, nullptr);
  keptPositions_ = keptRowPositions();
  auto emitAt = [&](llvm::Value *point) {
    placeVars(point, kernel_.outerRanges, 0);
    scopes_.emplace_back();
    emitPoint();
    scopes_.pop_back();
  };
  if (schedule_.pointsPerThread > 1) {
    // A thread's points lie a block apart: each step of the block's threads
    // stays coalesced, and their loads are in flight together.
    for (unsigned k = 0; k < schedule_.pointsPerThread; ++k) {
      llvm::Value *pointK = builder_.CreateAdd(
          builder_.CreateMul(blockIndex, width),
          builder_.CreateAdd(builder_.getInt64(uint64_t(k) * schedule_.block),
                             thread));
      emitIf(builder_.CreateICmpULT(pointK, sizeValue(schedule_.points)),
             "point", [&] { emitAt(pointK); });
    }
  } else {
    if (!valid_) {
      // Nothing past the last point: a warp holds whole points, so it exits
      // whole and its shuffles see every lane.
      llvm::BasicBlock *body =
          llvm::BasicBlock::Create(context_, "point", function_);
      builder_.CreateCondBr(inRange, body, done);
      builder_.SetInsertPoint(body);
    }
    emitAt(point);
  }
  builder_.CreateBr(done);
  builder_.SetInsertPoint(done);
  builder_.CreateRetVoid();

  // The kernel flag the NVPTX backend reads, and the block size it is
  // launched with (.maxntid): ptxas then keeps to the registers a block of
  // 1024 threads has (64 each) instead of failing the launch.
  auto annotate = [&](const char *key, unsigned value) {
    llvm::Metadata *operands[] = {
        llvm::ValueAsMetadata::get(function_),
        llvm::MDString::get(context_, key),
        llvm::ConstantAsMetadata::get(builder_.getInt32(value))};
    module_.getOrInsertNamedMetadata("nvvm.annotations")
        ->addOperand(llvm::MDNode::get(context_, operands));
  };
  annotate("kernel", 1);
  annotate("maxntidx", schedule_.block);
  return {name, parameterBuffers_};
}

void NvptxKernelEmitter::emitPoint() {
  reductionValues_.assign(static_cast<size_t>(kernel_.reductionCount()),
                          nullptr);
  size_t reductionBase = 0;
  for (size_t loopIndex = 0; loopIndex < kernel_.loops.size(); ++loopIndex) {
    emitLoop(loopIndex, reductionBase);
    reductionBase += kernel_.loops[loopIndex].reductions.size();
  }
}

void NvptxKernelEmitter::emitLoop(size_t loopIndex, size_t reductionBase) {
  const loop::Loop &loop = kernel_.loops[loopIndex];
  size_t outer = kernel_.outerRanges.size();
  if (loop.ranges.empty()) {
    scopes_.emplace_back();
    for (size_t index = 0; index < loop.reductions.size(); ++index) {
      const loop::Reduction &reduction = loop.reductions[index];
      bool isArg =
          reduction.op == ReduceOp::ArgMax || reduction.op == ReduceOp::ArgMin;
      reductionValues_[reductionBase + index] =
          isArg
              ? builder_.getInt64(0)
              : emitCast(emit(reduction.value, false), reduction.value->dtype(),
                         accumulatorDType(reduction));
    }
    llvm::Value *stores = valid_;
    if (lane_) { // every lane has the point's values; one stores them
      llvm::Value *first = builder_.CreateICmpEQ(lane_, builder_.getInt64(0));
      stores = stores ? builder_.CreateAnd(stores, first) : first;
    }
    if (stores && !loop.stores.empty())
      emitIf(stores, "store", [&] { emitStores(loop.stores); });
    else
      emitStores(loop.stores);
    scopes_.pop_back();
    return;
  }

  llvm::IRBuilder<> entryBuilder(entry_, entry_->begin());
  std::vector<Accumulator> accumulators;
  for (const loop::Reduction &reduction : loop.reductions) {
    DType dtype = accumulatorDType(reduction);
    llvm::Type *type = computeType(dtype);
    Accumulator acc;
    acc.value = entryBuilder.CreateAlloca(type);
    builder_.CreateStore(algebra_.identity(reduction.op, dtype, 1), acc.value);
    if (reduction.op == ReduceOp::ArgMax || reduction.op == ReduceOp::ArgMin) {
      acc.index = entryBuilder.CreateAlloca(builder_.getInt64Ty());
      builder_.CreateStore(
          builder_.getInt64(std::numeric_limits<int64_t>::max()), acc.index);
    }
    // Compensated (Kahan) float sums where a lane adds many elements; a
    // kept row's lane adds at most kMaxKeptPositions, then the lanes combine
    // as a tree (as torch's own GPU sums do), and the compensation's
    // arithmetic would cost more than the row's memory traffic.
    if (isFloatSum(reduction) && !keptPositions_) {
      acc.compensation = entryBuilder.CreateAlloca(type);
      builder_.CreateStore(llvm::Constant::getNullValue(type),
                           acc.compensation);
    }
    accumulators.push_back(acc);
  }

  // One point of the loop: accumulate every reduction, then the stores.
  auto accumulate = [&](llvm::Value *position) {
    for (size_t index = 0; index < loop.reductions.size(); ++index) {
      const loop::Reduction &reduction = loop.reductions[index];
      Accumulator &acc = accumulators[index];
      DType dtype = accumulatorDType(reduction);
      llvm::Type *type = acc.value->getAllocatedType();
      llvm::Value *value = emitCast(emit(reduction.value, false),
                                    reduction.value->dtype(), dtype);
      llvm::Value *current = builder_.CreateLoad(type, acc.value);
      if (acc.index) {
        auto [best, bestIndex] = algebra_.combineArg(
            reduction.op, dtype, current,
            builder_.CreateLoad(builder_.getInt64Ty(), acc.index), value,
            position);
        builder_.CreateStore(best, acc.value);
        builder_.CreateStore(bestIndex, acc.index);
      } else if (acc.compensation) {
        // Kahan: long sums stay accurate in float32.
        auto [sum, error] = algebra_.compensatedAdd(
            current, builder_.CreateLoad(type, acc.compensation), value);
        builder_.CreateStore(error, acc.compensation);
        builder_.CreateStore(sum, acc.value);
      } else {
        builder_.CreateStore(
            algebra_.combine(reduction.op, dtype, current, value), acc.value);
      }
    }
  };
  auto visit = [&](llvm::Value *position) {
    accumulate(position);
    emitStores(loop.stores);
  };

  std::vector<llvm::Value *> extents;
  for (SymSize range : loop.ranges)
    extents.push_back(sizeValue(range));
  if (int64_t positions = keptPositions_) {
    // Kept rows: each lane's positions unrolled, the same in every loop, so
    // the row's loads (and what is computed from them) stay in registers
    // from the first loop to the last. Threads past the last point compute
    // at point 0 and store nothing.
    if (kept_.empty())
      kept_.resize(static_cast<size_t>(positions));
    for (int64_t j = 0; j < positions; ++j) {
      llvm::Value *position = builder_.CreateAdd(
          lane_, builder_.getInt64(j * schedule_.lanesPerPoint));
      scopes_.emplace_back();
      position_ = j;
      placeVars(position, loop.ranges, outer);
      accumulate(position);
      if (valid_ && !loop.stores.empty())
        emitIf(valid_, "store", [&] { emitStores(loop.stores); });
      else
        emitStores(loop.stores);
      position_ = -1;
      scopes_.pop_back();
    }
  } else if (lane_) {
    // The point's lanes take the loop's points in turn (consecutive lanes,
    // consecutive points: contiguous rows load coalesced).
    llvm::Value *total = sizeValue(numelOf(loop.ranges.constants()));
    if (valid_)
      total = builder_.CreateSelect(valid_, total, builder_.getInt64(0));
    countedLoop(lane_, total, schedule_.lanesPerPoint,
                [&](llvm::Value *position) {
                  placeVars(position, loop.ranges, outer);
                  visit(position);
                });
  } else {
    auto scopedLoop = [&](llvm::Value *start, llvm::Value *end, int64_t step,
                          LoopBody body) {
      countedLoop(start, end, step, body);
    };
    emitLoopNest(
        builder_, llvm::ArrayRef<llvm::Value *>(extents).drop_back(),
        builder_.getInt64(0), scopedLoop,
        [&](llvm::ArrayRef<llvm::Value *> indices, llvm::Value *rowPosition) {
          for (size_t d = 0; d < indices.size(); ++d)
            vars_[outer + d] = indices[d];
          countedLoop(
              builder_.getInt64(0), extents.back(), 1, [&](llvm::Value *last) {
                vars_[outer + loop.ranges.size() - 1] = last;
                visit(builder_.CreateAdd(
                    builder_.CreateMul(rowPosition, extents.back()), last));
              });
        });
  }
  for (size_t d = 0; d < loop.ranges.size(); ++d)
    vars_[outer + d] = nullptr;

  // Each lane's partial results, then the point's.
  std::vector<llvm::Value *> values, positions;
  for (size_t index = 0; index < loop.reductions.size(); ++index) {
    const loop::Reduction &reduction = loop.reductions[index];
    const Accumulator &acc = accumulators[index];
    DType dtype = accumulatorDType(reduction);
    llvm::Value *value =
        builder_.CreateLoad(acc.value->getAllocatedType(), acc.value);
    llvm::Value *position =
        acc.index ? builder_.CreateLoad(builder_.getInt64Ty(), acc.index)
                  : nullptr;
    if (acc.compensation) // the sum less its lost low part
      value = builder_.CreateFSub(
          value, builder_.CreateLoad(acc.compensation->getAllocatedType(),
                                     acc.compensation));
    if (lane_)
      std::tie(value, position) =
          combineAcrossWarp(reduction, dtype, value, position);
    values.push_back(value);
    positions.push_back(position);
  }
  if (shared_ && !loop.reductions.empty())
    combineAcrossWarps(loop, values, positions);
  for (size_t index = 0; index < loop.reductions.size(); ++index) {
    const loop::Reduction &reduction = loop.reductions[index];
    DType dtype = accumulatorDType(reduction);
    llvm::Value *value = values[index];
    llvm::Value *position = positions[index];
    if (position) {
      // No point at all (an empty range) gives 0.
      llvm::Value *none = builder_.CreateICmpEQ(
          position, builder_.getInt64(std::numeric_limits<int64_t>::max()));
      value = builder_.CreateSelect(none, builder_.getInt64(0), position);
    } else {
      value = roundTo(dtype, value);
    }
    reductionValues_[reductionBase + index] = value;
  }
}

llvm::Value *NvptxKernelEmitter::shuffleXor(llvm::Value *value,
                                            unsigned offset) {
  llvm::Type *type = value->getType();
  auto shuffle32 = [&](llvm::Value *word) {
    return builder_.CreateIntrinsic(
        llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, {},
        {builder_.getInt32(0xffffffffu), word, builder_.getInt32(offset),
         builder_.getInt32(31)});
  };
  unsigned bits = type->getPrimitiveSizeInBits();
  llvm::Type *integer = builder_.getIntNTy(bits);
  llvm::Value *asInteger =
      type->isIntegerTy() ? value : builder_.CreateBitCast(value, integer);
  llvm::Value *shuffled;
  if (bits <= 32) {
    shuffled = builder_.CreateTrunc(
        shuffle32(builder_.CreateZExt(asInteger, builder_.getInt32Ty())),
        integer);
  } else { // 64 bits: two words
    llvm::Value *low =
        shuffle32(builder_.CreateTrunc(asInteger, builder_.getInt32Ty()));
    llvm::Value *high = shuffle32(builder_.CreateTrunc(
        builder_.CreateLShr(asInteger, 32), builder_.getInt32Ty()));
    shuffled = builder_.CreateOr(
        builder_.CreateZExt(low, integer),
        builder_.CreateShl(builder_.CreateZExt(high, integer), 32));
  }
  return type->isIntegerTy() ? shuffled
                             : builder_.CreateBitCast(shuffled, type);
}

std::pair<llvm::Value *, llvm::Value *>
NvptxKernelEmitter::combineAcrossWarp(const loop::Reduction &reduction,
                                      DType dtype, llvm::Value *value,
                                      llvm::Value *position) {
  for (unsigned step = schedule_.lanesPerWarp() / 2; step > 0; step /= 2) {
    unsigned offset = step * schedule_.laneStride();
    llvm::Value *other = shuffleXor(value, offset);
    if (position)
      std::tie(value, position) =
          algebra_.combineArg(reduction.op, dtype, value, position, other,
                              shuffleXor(position, offset));
    else
      value = algebra_.combine(reduction.op, dtype, value, other);
  }
  return {value, position};
}

llvm::Value *NvptxKernelEmitter::sharedSlot(llvm::Value *word) {
  return builder_.CreateGEP(builder_.getInt64Ty(), shared_, {word});
}

void NvptxKernelEmitter::combineAcrossWarps(
    const loop::Loop &loop, std::vector<llvm::Value *> &values,
    std::vector<llvm::Value *> &positions) {
  // The loop's area holds, for each reduction, a word per partial of each
  // point of the block, partial-major (the points of a column mapping's
  // warp read consecutive words: no bank conflicts), then as many for
  // ArgMax/ArgMin's positions.
  int64_t partials = schedule_.partialsPerPoint();
  int64_t slots = int64_t(schedule_.pointsPerBlock) * partials;
  int64_t area = int64_t(reducingLoops_++ % 2) * sharedWords_;
  std::vector<int64_t> regions;
  int64_t word = area;
  for (llvm::Value *position : positions) {
    regions.push_back(word);
    word += slots * (position ? 2 : 1);
  }
  llvm::Value *lanesPerWarp = builder_.getInt64(schedule_.lanesPerWarp());
  llvm::Value *width = builder_.getInt64(schedule_.pointsPerBlock);
  auto slot = [&](int64_t region, llvm::Value *within) {
    return sharedSlot(builder_.CreateAdd(builder_.getInt64(region), within));
  };

  // One lane of each warp writes the warp's partials.
  llvm::Value *writes = builder_.CreateICmpEQ(
      builder_.CreateURem(lane_, lanesPerWarp), builder_.getInt64(0));
  emitIf(writes, "partials", [&] {
    llvm::Value *own = builder_.CreateAdd(
        builder_.CreateMul(builder_.CreateUDiv(lane_, lanesPerWarp), width),
        pointInBlock_);
    for (size_t index = 0; index < values.size(); ++index) {
      builder_.CreateAlignedStore(values[index], slot(regions[index], own),
                                  llvm::Align(8));
      if (positions[index])
        builder_.CreateAlignedStore(positions[index],
                                    slot(regions[index] + slots, own),
                                    llvm::Align(8));
    }
  });
  builder_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});

  // Every lane combines its point's partials in the same order, so all get
  // the same result without a second barrier to broadcast it.
  for (size_t index = 0; index < values.size(); ++index) {
    const loop::Reduction &reduction = loop.reductions[index];
    DType dtype = accumulatorDType(reduction);
    llvm::Type *type = values[index]->getType();
    llvm::Value *value = nullptr, *position = nullptr;
    for (int64_t partial = 0; partial < partials; ++partial) {
      llvm::Value *within = builder_.CreateAdd(
          builder_.getInt64(partial * schedule_.pointsPerBlock), pointInBlock_);
      llvm::Value *next = builder_.CreateAlignedLoad(
          type, slot(regions[index], within), llvm::Align(8));
      llvm::Value *nextPosition =
          positions[index]
              ? builder_.CreateAlignedLoad(builder_.getInt64Ty(),
                                           slot(regions[index] + slots, within),
                                           llvm::Align(8))
              : nullptr;
      if (!value)
        std::tie(value, position) = std::pair(next, nextPosition);
      else if (position)
        std::tie(value, position) = algebra_.combineArg(
            reduction.op, dtype, value, position, next, nextPosition);
      else
        value = algebra_.combine(reduction.op, dtype, value, next);
    }
    values[index] = value;
    positions[index] = position;
  }
}

void NvptxKernelEmitter::emitStores(const std::vector<loop::Store> &stores) {
  // Every value is computed before any store: the stores of one point are
  // one parallel assignment.
  std::vector<std::pair<llvm::Value *, llvm::Value *>> pending;
  for (const loop::Store &store : stores) {
    DType dtype = program_.buffers.at(store.buffer).dtype();
    llvm::Value *index = emit(store.index, false);
    llvm::Value *value = toStorage(
        dtype, emitCast(emit(store.value, false), store.value->dtype(), dtype));
    llvm::Value *address = builder_.CreateGEP(
        storageType(dtype), bufferPointer(store.buffer), index);
    pending.emplace_back(address, value);
  }
  for (size_t i = 0; i < stores.size(); ++i) {
    DType dtype = program_.buffers.at(stores[i].buffer).dtype();
    builder_.CreateAlignedStore(pending[i].second, pending[i].first,
                                llvm::Align(itemSize(dtype)));
  }
}

} // namespace

NvptxKernel emitNvptxKernel(llvm::Module &module, const loop::Program &program,
                            const loop::Kernel &kernel,
                            const GpuKernelSchedule &schedule,
                            const std::string &name) {
  NvptxKernelEmitter emitter(module, program, kernel, schedule);
  return emitter.emitFunction(name);
}

} // namespace kiln::backend
