// The NVPTX kernel emitter: the shared expression emitter with the GPU's
// hooks (kernel parameters as buffer addresses, libdevice math) and the GPU
// schedule's mapping: the lanes of an outer point share each of its loops,
// their partial reductions (compensated float sums per row lane) combine by
// warp shuffles, then through shared memory across the warps of a block.
// Where a kernel's accesses walk memory contiguously, a thread takes 4
// consecutive positions as one 128-bit load or store (the vector body,
// which the host launches where the buffers are aligned; the scalar body is
// a kernel of its own, for launches where they are not), and lanes' loops
// take 4 positions (or groups) a step, 8 down columns. float32 exp (and
// tanh, erf, sigmoid through it) uses the GPU's special-function unit.
// Depends on backend/nvptx/NvptxKernelEmitter.h, backend/llvm/, ir/, LLVM.
#include "backend/nvptx/NvptxKernelEmitter.h"

#include "backend/llvm/ExprEmitter.h"
#include "backend/llvm/LoopEmitter.h"
#include "backend/llvm/ReductionAlgebra.h"
#include "ir/Error.h"

#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <tuple>
#include <unordered_set>

namespace kiln::backend {

namespace {

using loop::Expr;
using loop::ReduceOp;
using loop::UnaryOp;

// exp(x) = 2^k 2^r: k is x log2(e) rounded to an integer, kept within
// [-126, 126] so that 2^k is a normal float made from its bits; r = x log2(e)
// - k, with log2(e) in two parts so that r keeps the bits the product rounds
// away. 2^r comes from the special-function unit (ex2.approx, about 2 ulp;
// eager's expf on the GPU uses it too); past the clamp r grows, and 2^r
// then overflows to inf, or the product underflows through the subnormals
// to 0, as exp does. 11 instructions where the portable polynomial takes
// 30: kernels of many exps (softmax rows kept in registers) are half as
// long for the driver to compile. NaN stays NaN through r.
llvm::Value *emitExpF32(llvm::IRBuilderBase &builder, llvm::Value *x) {
  constexpr double kLog2eHigh = 1.44269502162933349609375; // float(log2 e)
  constexpr double kLog2eLow = 1.925963033500011e-08;      // log2 e - high
  auto constant = [&](double value) {
    return llvm::ConstantFP::get(x->getType(), value);
  };
  llvm::Value *k =
      builder.CreateIntrinsic(llvm::Intrinsic::rint, {x->getType()},
                              {builder.CreateFMul(x, constant(kLog2eHigh))});
  k = builder.CreateIntrinsic(llvm::Intrinsic::minnum, {x->getType()},
                              {k, constant(126.0)});
  k = builder.CreateIntrinsic(llvm::Intrinsic::maxnum, {x->getType()},
                              {k, constant(-126.0)});
  llvm::Value *r =
      builder.CreateIntrinsic(llvm::Intrinsic::fma, {x->getType()},
                              {x, constant(kLog2eHigh), builder.CreateFNeg(k)});
  r = builder.CreateIntrinsic(llvm::Intrinsic::fma, {x->getType()},
                              {x, constant(kLog2eLow), r});
  llvm::Value *power =
      builder.CreateIntrinsic(llvm::Intrinsic::nvvm_ex2_approx_ftz_f, {}, {r});
  llvm::Value *biased = builder.CreateAdd(
      builder.CreateFPToSI(k, builder.getInt32Ty()), builder.getInt32(127));
  llvm::Value *scale = builder.CreateBitCast(
      builder.CreateShl(biased, builder.getInt32(23)), x->getType());
  return builder.CreateFMul(power, scale);
}

struct Accumulator {
  llvm::AllocaInst *value = nullptr;
  llvm::AllocaInst *index = nullptr;        // ArgMax/ArgMin
  llvm::AllocaInst *compensation = nullptr; // float sums (Kahan)
};

class NvptxKernelEmitter : public ExprEmitter {
public:
  NvptxKernelEmitter(llvm::Module &module, const loop::Program &program,
                     const loop::Kernel &kernel,
                     const GpuKernelSchedule &schedule, GroupedBodies bodies)
      : ExprEmitter(module, program, "the GPU code generator"), kernel_(kernel),
        schedule_(schedule), bodies_(bodies), algebra_(*this) {}

  NvptxKernel emitFunction(const std::string &name);

protected:
  llvm::Value *bufferPointer(int64_t buffer) override;
  llvm::Value *callMath(const char *name,
                        std::vector<llvm::Value *> args) override;
  /// float32 exp (and tanh and erf, built on it) through the GPU's
  /// special-function unit (the emitter makes scalars only).
  ExpF32 expF32() const override { return emitExpF32; }
  ExpF32 normalExpF32() const override { return emitExpF32; }
  /// tanh takes exp of 2|x|, never below 0.
  llvm::Value *emitTanhF32(llvm::Value *x) override {
    return emitInlineTanhF32(builder_, x, emitExpF32);
  }
  /// Kept rows: a value computed at a lane's j-th position of one loop is
  /// the value at that position in the kernel's later loops.
  llvm::Value *reuse(const Expr *expr, bool vector) override;
  void computed(const Expr *expr, llvm::Value *value) override;
  /// In a grouped body, a load along the group's variable is one element of
  /// the group's vector load.
  llvm::Value *loadElements(const Expr *load, DType dtype,
                            bool vector) override;

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
  /// The variable along which this kernel's threads take kGroup consecutive
  /// positions at once (-1: none): the last outer variable of a large
  /// pointwise kernel, or the last loop variable of a row kernel (kept rows
  /// and the loops of row lanes).
  int64_t groupVariable();
  /// Whether an access at `index` walks memory contiguously along the group
  /// variable: coefficient 1, every other variable's a multiple of kGroup,
  /// no loads or reductions in the index. Such an access is one kGroup-wide
  /// vector where its address at the origin is aligned to one.
  bool grouped(const Expr *index);
  /// The kernel's grouped accesses (buffer, index), loads and stores.
  template <typename Visit> void forEachGroupedAccess(Visit visit);
  /// The grouped accesses as the host checks them before a launch: their
  /// offsets in bytes with every variable 0 (the alignment of a grouped
  /// access is the same at every point).
  std::vector<AlignedAccess> hostAlignmentChecks();
  /// The vector type and alignment of a group's access to `dtype`.
  llvm::Type *groupType(DType dtype);
  llvm::Align groupAlign(DType dtype);
  /// A thread's points of a large pointwise kernel: kGroup consecutive ones
  /// (grouped), or pointsPerThread a block apart.
  void emitThreadPoints(llvm::Value *blockIndex, llvm::Value *thread);
  /// `body` at each member of the group whose first position is `start` in
  /// `ranges` (variables from `first`): the group variable counts on, the
  /// other variables stay, each member in its own scope.
  void forEachMember(llvm::Value *start, const loop::Ranges &ranges,
                     size_t first,
                     llvm::function_ref<void(llvm::Value *position)> body);
  /// One group of a kept-row loop: positions `groupIndex` * kGroup .. + kGroup
  /// - 1 of the lane, their reductions, then their stores.
  void emitKeptGroup(const loop::Loop &loop, int64_t groupIndex,
                     llvm::function_ref<void(llvm::Value *)> accumulate);
  /// The loop's positions a lane takes (lane, lane + lanes, ... below
  /// `total`), kLaneUnroll (kColumnLaneUnroll) positions or groups a step
  /// where there are that many, then one at a time.
  void emitLaneLoop(const loop::Loop &loop, llvm::Value *total,
                    llvm::function_ref<void(llvm::Value *)> visit);
  /// The positions (or groups) a step of a lane loop takes.
  int64_t laneUnroll() const;

  const loop::Kernel &kernel_;
  const GpuKernelSchedule &schedule_;
  GroupedBodies bodies_;
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
  /// Grouped bodies (groupVariable): the variable, whether the body being
  /// emitted is the grouped one, the member (0..kGroup-1) of the group being
  /// emitted, the group's vector loads, and its stores gathered until the
  /// last member (address, values).
  int64_t groupVar_ = -1;
  bool grouping_ = false;
  int64_t member_ = -1; // -1: no group
  std::unordered_map<const Expr *, bool> groupedMemo_;
  std::unordered_map<const Expr *, llvm::Value *> groupLoads_;
  struct GroupStore {
    llvm::Value *address = nullptr;
    std::vector<llvm::Value *> values;
  };
  std::unordered_map<const loop::Store *, GroupStore> groupStores_;
};

// A group: the consecutive positions a thread loads and stores as one
// vector (4 float32: ld.global.v4.f32, 128 bits).
constexpr int64_t kGroup = 4;
// A lane's loop takes this many positions (or groups) a step: the loads in
// flight of each lane; a column mapping's lanes, whose loads are 4 bytes
// each, kColumnLaneUnroll (a column sum of 64 MB: 28.7 us with 4, 28.3 with
// 8, measured on an H100).
constexpr int64_t kLaneUnroll = 4;
constexpr int64_t kColumnLaneUnroll = 8;
constexpr int64_t kMaxVectorBytes = 16;

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

bool NvptxKernelEmitter::grouped(const Expr *index) {
  auto found = groupedMemo_.find(index);
  if (found != groupedMemo_.end())
    return found->second;
  bool result =
      loop::affineCoefficient(index, groupVar_) == std::optional<int64_t>(1) &&
      !loop::anyNode(index, [](const Expr *node) {
        return node->kind() == loop::ExprKind::Load ||
               node->kind() == loop::ExprKind::ReductionValue ||
               node->kind() == loop::ExprKind::Symbol;
      });
  for (size_t var = 0; result && var < vars_.size(); ++var) {
    if (int64_t(var) == groupVar_)
      continue;
    std::optional<int64_t> coefficient =
        loop::affineCoefficient(index, static_cast<int64_t>(var));
    result = coefficient && *coefficient % kGroup == 0;
  }
  return groupedMemo_[index] = result;
}

template <typename Visit>
void NvptxKernelEmitter::forEachGroupedAccess(Visit visit) {
  for (const loop::Loop &loop : kernel_.loops) {
    loop::forEachExpr(loop, [&](const Expr *expr) {
      for (const Expr *load : loop::loadsOf(expr))
        if (grouped(load->index()))
          visit(load->id(), load->index());
    });
    for (const loop::Store &store : loop.stores)
      if (grouped(store.index))
        visit(store.buffer, store.index);
  }
}

int64_t NvptxKernelEmitter::groupVariable() {
  size_t outer = kernel_.outerRanges.size();
  int64_t var = -1;
  SymSize range;
  if (schedule_.pointsPerThread == kGroup && !lane_ && outer > 0) {
    for (const loop::Loop &loop : kernel_.loops)
      if (!loop.ranges.empty()) // a loop's stores would be apart
        return -1;
    var = static_cast<int64_t>(outer) - 1;
    range = kernel_.outerRanges.back();
  } else if ((keptPositions_ % kGroup == 0 && keptPositions_ > 0) ||
             (lane_ && !schedule_.pointsInnermost() && !keptPositions_)) {
    // Kept rows, or rows the lanes loop over: every loop along the same
    // last variable, a multiple of kGroup long.
    for (const loop::Loop &loop : kernel_.loops) {
      if (loop.ranges.empty())
        continue;
      int64_t last = static_cast<int64_t>(outer + loop.ranges.size()) - 1;
      if ((var >= 0 && last != var) ||
          loop.ranges[loop.ranges.size() - 1]->constant().value_or(1) %
                  kGroup !=
              0)
        return -1;
      var = last;
      range = loop.ranges[loop.ranges.size() - 1];
    }
  }
  if (var < 0 || range->constant().value_or(1) % kGroup != 0)
    return -1;
  // Stores wait for the group's last member: no load may read them.
  for (const loop::Loop &loop : kernel_.loops) {
    bool readsStored = false;
    loop::forEachExpr(loop, [&](const Expr *expr) {
      readsStored = readsStored || readsStoredBuffer(expr);
    });
    if (readsStored)
      return -1;
  }
  groupVar_ = var;
  bool any = false;
  forEachGroupedAccess([&](int64_t, const Expr *) { any = true; });
  groupVar_ = -1;
  groupedMemo_.clear();
  return any ? var : -1;
}

llvm::Type *NvptxKernelEmitter::groupType(DType dtype) {
  return llvm::FixedVectorType::get(storageType(dtype),
                                    static_cast<unsigned>(kGroup));
}

llvm::Align NvptxKernelEmitter::groupAlign(DType dtype) {
  return llvm::Align(static_cast<uint64_t>(
      std::min<int64_t>(kMaxVectorBytes, kGroup * itemSize(dtype))));
}

std::vector<AlignedAccess> NvptxKernelEmitter::hostAlignmentChecks() {
  std::vector<const Expr *> origin(vars_.size(), program_.exprs->integer(0));
  std::vector<AlignedAccess> checks;
  forEachGroupedAccess([&](int64_t buffer, const Expr *index) {
    const Expr *offset = program_.exprs->substituteVars(index, origin);
    if (!offset->isConstant()) // a size symbol, which emit() refuses too
      throw Unsupported(generator() + " does not compile sizes that vary "
                                      "between calls");
    DType dtype = program_.buffers.at(buffer).dtype();
    AlignedAccess check;
    check.parameter = static_cast<size_t>(
        std::find(parameterBuffers_.begin(), parameterBuffers_.end(), buffer) -
        parameterBuffers_.begin());
    check.byteOffset = offset->integer() * itemSize(dtype);
    check.alignment = static_cast<unsigned>(groupAlign(dtype).value());
    if (std::find(checks.begin(), checks.end(), check) == checks.end())
      checks.push_back(check);
  });
  return checks;
}

llvm::Value *NvptxKernelEmitter::loadElements(const Expr *load, DType dtype,
                                              bool vector) {
  if (member_ < 0 || vector || !grouped(load->index()))
    return ExprEmitter::loadElements(load, dtype, vector);
  llvm::Value *&elements = groupLoads_[load];
  if (!elements) {
    // The group's first position: this member's less its place in it.
    llvm::Value *index = builder_.CreateSub(emit(load->index(), false),
                                            builder_.getInt64(member_));
    elements = builder_.CreateAlignedLoad(
        groupType(dtype),
        builder_.CreateGEP(storageType(dtype), bufferPointer(load->id()),
                           index),
        groupAlign(dtype));
  }
  return builder_.CreateExtractElement(elements, uint64_t(member_));
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
  auto emitBody = [&] {
    if (schedule_.pointsPerThread > 1) {
      emitThreadPoints(blockIndex, thread);
      return;
    }
    if (!valid_) {
      // Nothing past the last point: a warp holds whole points, so it exits
      // whole and its shuffles see every lane.
      llvm::BasicBlock *body =
          llvm::BasicBlock::Create(context_, "point", function_);
      builder_.CreateCondBr(inRange, body, done);
      builder_.SetInsertPoint(body);
    }
    placeVars(point, kernel_.outerRanges, 0);
    scopes_.emplace_back();
    emitPoint();
    scopes_.pop_back();
  };
  groupVar_ = groupVariable();
  std::vector<AlignedAccess> aligned;
  if (groupVar_ >= 0 && bodies_ == GroupedBodies::Vector) {
    // The vector body alone: the host launches it where its accesses are
    // aligned (almost always: torch's allocations are), and the scalar
    // body, compiled at the first call that needs it, elsewhere.
    aligned = hostAlignmentChecks();
    grouping_ = true;
  } else if (bodies_ == GroupedBodies::Scalar && groupVar_ < 0) {
    throw Error("the GPU code generator: kernel " + name +
                " has no vector body to stand in for");
  }
  emitBody();
  grouping_ = false;
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
  return {name, parameterBuffers_, std::move(aligned)};
}

void NvptxKernelEmitter::emitThreadPoints(llvm::Value *blockIndex,
                                          llvm::Value *thread) {
  llvm::Value *first = builder_.CreateMul(
      blockIndex, builder_.getInt64(schedule_.pointsPerBlock));
  llvm::Value *points = sizeValue(schedule_.points);
  if (grouping_) {
    // kGroup consecutive points, whose accesses along the last variable are
    // one vector each; the points are a multiple of kGroup.
    llvm::Value *start = builder_.CreateAdd(
        first, builder_.CreateMul(thread, builder_.getInt64(kGroup)));
    emitIf(builder_.CreateICmpULT(start, points), "group", [&] {
      forEachMember(start, kernel_.outerRanges, 0,
                    [&](llvm::Value *) { emitPoint(); });
    });
    return;
  }
  // A thread's points lie a block apart: each step of the block's threads
  // stays coalesced, and their loads are in flight together.
  for (unsigned k = 0; k < schedule_.pointsPerThread; ++k) {
    llvm::Value *point = builder_.CreateAdd(
        first, builder_.CreateAdd(
                   builder_.getInt64(uint64_t(k) * schedule_.block), thread));
    emitIf(builder_.CreateICmpULT(point, points), "point", [&] {
      placeVars(point, kernel_.outerRanges, 0);
      scopes_.emplace_back();
      emitPoint();
      scopes_.pop_back();
    });
  }
}

void NvptxKernelEmitter::forEachMember(
    llvm::Value *start, const loop::Ranges &ranges, size_t first,
    llvm::function_ref<void(llvm::Value *position)> body) {
  placeVars(start, ranges, first);
  llvm::Value *base = vars_[groupVar_];
  groupLoads_.clear();
  for (member_ = 0; member_ < kGroup; ++member_) {
    vars_[groupVar_] = builder_.CreateAdd(base, builder_.getInt64(member_));
    scopes_.emplace_back();
    body(builder_.CreateAdd(start, builder_.getInt64(member_)));
    scopes_.pop_back();
  }
  member_ = -1;
}

void NvptxKernelEmitter::emitKeptGroup(
    const loop::Loop &loop, int64_t groupIndex,
    llvm::function_ref<void(llvm::Value *)> accumulate) {
  size_t outer = kernel_.outerRanges.size();
  // The lane's group g holds positions (g * lanes + lane) * kGroup + k.
  llvm::Value *start = builder_.CreateMul(
      builder_.CreateAdd(
          builder_.getInt64(groupIndex * int64_t(schedule_.lanesPerPoint)),
          lane_),
      builder_.getInt64(kGroup));
  auto atMember = [&](llvm::function_ref<void(llvm::Value *)> body) {
    forEachMember(start, loop.ranges, outer, [&](llvm::Value *position) {
      position_ = groupIndex * kGroup + member_;
      body(position);
    });
    position_ = -1;
  };
  atMember(accumulate);
  if (loop.stores.empty())
    return;
  // The members' stores after their reductions (no load reads a stored
  // buffer): one vector store each, under one condition.
  auto stores = [&] {
    atMember([&](llvm::Value *) { emitStores(loop.stores); });
  };
  if (valid_)
    emitIf(valid_, "store", stores);
  else
    stores();
}

int64_t NvptxKernelEmitter::laneUnroll() const {
  return schedule_.mapping == GpuMapping::Column ? kColumnLaneUnroll
                                                 : kLaneUnroll;
}

void NvptxKernelEmitter::emitLaneLoop(
    const loop::Loop &loop, llvm::Value *total,
    llvm::function_ref<void(llvm::Value *)> visit) {
  size_t outer = kernel_.outerRanges.size();
  int64_t lanes = schedule_.lanesPerPoint;
  int64_t count = numelOf(loop.ranges.constants());
  // Grouped (aligned body, the loop along the group variable): a step
  // holds `unroll` groups of the lane, group u of step i at positions
  // ((i * unroll + u) * lanes + lane) * kGroup...; else `unroll` single
  // positions a step. Every lane takes as many whole steps, the
  // rest one position at a time.
  bool groups =
      grouping_ && vars_.size() > size_t(groupVar_) &&
      outer + loop.ranges.size() == size_t(groupVar_) + 1 &&
      loop.ranges[loop.ranges.size() - 1]->constant().value_or(1) % kGroup == 0;
  int64_t width = groups ? kGroup : 1;
  int64_t unroll = laneUnroll();
  int64_t span = unroll * lanes * width;
  auto at = [&](llvm::Value *position) {
    placeVars(position, loop.ranges, outer);
    visit(position);
  };
  llvm::Value *start = lane_;
  if (count >= span) {
    llvm::Value *steps = builder_.CreateUDiv(total, builder_.getInt64(span));
    countedLoop(builder_.getInt64(0), steps, 1, [&](llvm::Value *step) {
      llvm::Value *first = builder_.CreateMul(step, builder_.getInt64(span));
      for (int64_t u = 0; u < unroll; ++u) {
        llvm::Value *position = builder_.CreateAdd(
            first, builder_.CreateMul(
                       builder_.CreateAdd(lane_, builder_.getInt64(u * lanes)),
                       builder_.getInt64(width)));
        scopes_.emplace_back();
        if (groups)
          forEachMember(position, loop.ranges, outer, visit);
        else
          at(position);
        scopes_.pop_back();
      }
    });
    start = builder_.CreateAdd(
        lane_, builder_.CreateMul(steps, builder_.getInt64(span)));
  }
  countedLoop(start, total, lanes, at);
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
      DType dtype = accumulatorDType(reduction);
      reductionValues_[reductionBase + index] =
          isArg
              ? builder_.getInt64(0)
              : algebra_.ofOneElement(reduction.op, dtype,
                                      emitCast(emit(reduction.value, false),
                                               reduction.value->dtype(), dtype),
                                      1);
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
    // Compensated (Kahan) float sums where a lane adds many elements of a
    // row. Plain sums, then the lanes combine as a tree (as torch's own GPU
    // sums do), where the compensation's arithmetic would cost more than
    // the memory traffic: a kept row's lane adds at most kMaxKeptPositions;
    // a column lane, at most kMaxLaneWork rows, whose one chain of
    // dependent additions keeps the lane's loads from streaming (a column
    // sum of 64 MB: 28.1 us plain, 28.9 compensated; 34 with a chain per
    // unrolled step, measured on an H100).
    if (isFloatSum(reduction) && !keptPositions_ &&
        schedule_.mapping != GpuMapping::Column) {
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
    for (int64_t g = 0; grouping_ && g < positions / kGroup; ++g)
      emitKeptGroup(loop, g, accumulate);
    for (int64_t j = 0; !grouping_ && j < positions; ++j) {
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
    emitLaneLoop(loop, total, visit);
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
  std::vector<std::tuple<llvm::Value *, llvm::Value *, DType>> pending;
  std::vector<const loop::Store *> full; // grouped stores of the last member
  for (const loop::Store &store : stores) {
    DType dtype = program_.buffers.at(store.buffer).dtype();
    llvm::Value *index = emit(store.index, false);
    llvm::Value *value = toStorage(
        dtype, emitCast(emit(store.value, false), store.value->dtype(), dtype));
    if (member_ >= 0 && grouped(store.index)) {
      // Gathered until the group's last member, then one vector store.
      GroupStore &group = groupStores_[&store];
      if (member_ == 0)
        group = {builder_.CreateGEP(storageType(dtype),
                                    bufferPointer(store.buffer), index),
                 {}};
      group.values.push_back(value);
      if (member_ == kGroup - 1)
        full.push_back(&store);
      continue;
    }
    llvm::Value *address = builder_.CreateGEP(
        storageType(dtype), bufferPointer(store.buffer), index);
    pending.emplace_back(address, value, dtype);
  }
  for (const auto &[address, value, dtype] : pending)
    builder_.CreateAlignedStore(value, address, llvm::Align(itemSize(dtype)));
  for (const loop::Store *store : full) {
    DType dtype = program_.buffers.at(store->buffer).dtype();
    GroupStore &group = groupStores_.at(store);
    if (group.values.size() != size_t(kGroup))
      throw Error("GPU kernel " + kernel_.name +
                  ": a grouped store is missing members");
    llvm::Value *vector = llvm::PoisonValue::get(groupType(dtype));
    for (int64_t k = 0; k < kGroup; ++k)
      vector = builder_.CreateInsertElement(vector, group.values[size_t(k)],
                                            uint64_t(k));
    builder_.CreateAlignedStore(vector, group.address, groupAlign(dtype));
    groupStores_.erase(store);
  }
}

} // namespace

NvptxKernel emitNvptxKernel(llvm::Module &module, const loop::Program &program,
                            const loop::Kernel &kernel,
                            const GpuKernelSchedule &schedule,
                            const std::string &name, GroupedBodies bodies) {
  NvptxKernelEmitter emitter(module, program, kernel, schedule, bodies);
  return emitter.emitFunction(name);
}

} // namespace kiln::backend
