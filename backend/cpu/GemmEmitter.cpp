// kiln's float32 GEMM as LLVM IR: tiles of C (one row block by one column
// block of one batch) loop over k blocks, pack B and A into stack panels and
// run a register-blocked micro-kernel over them (Goto/BLIS).
// Depends on backend/cpu/GemmEmitter.h, backend/llvm/LoopEmitter.h, ir/, LLVM.
#include "backend/cpu/GemmEmitter.h"

#include "backend/llvm/LoopEmitter.h"
#include "ir/Error.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <vector>

namespace kiln::backend {
namespace {

/// Columns of the strips a costly epilogue runs over (emitEpilogueOfStrip).
constexpr int kEpilogueStripColumns = 256;

int64_t ceilDivide(int64_t value, int64_t divisor) {
  return (value + divisor - 1) / divisor;
}

int64_t roundUp(int64_t value, int64_t multiple) {
  return ceilDivide(value, multiple) * multiple;
}

bool isTrue(llvm::Value *flag) {
  auto *known = llvm::dyn_cast<llvm::ConstantInt>(flag);
  return known && known->isOne();
}

/// Register and cache blocking of one GEMM: all of it is known when the GEMM
/// is emitted, so that the IR has constant trip counts and offsets.
struct GemmPlan {
  int lanes = 8;         // floats in one vector register
  int rows = 6;          // MR: rows of C one micro-kernel call computes
  int columnVectors = 2; // vectors across one row of the micro-tile
  int columns = 16;      // NR = columnVectors * lanes
  int depthUnroll = 4;   // k steps one micro-kernel iteration takes
  int64_t depthBlock = 0, depthBlocks = 1;  // KC and the blocks of k
  int64_t rowBlock = 0, rowBlocks = 0;      // MC and the blocks down m
  int64_t rowTileBlocks = 1, rowTiles = 0;  // row blocks of a tile, tiles
  int64_t columnBlock = 0, columnTiles = 0; // NC and the tiles across n

  // B packed ahead (spec.packedBSlot): per batch of B and k block,
  // `packedBlockFloats` of panels; packB's units are (batch of B, k block,
  // group of column panels).
  bool bPackedAhead = false;
  int64_t packedBatches = 1, packedBlockFloats = 0;
  int64_t packGroupPanels = 1, packGroups = 1;

  int64_t paddedDepthBlock() const { return roundUp(depthBlock, depthUnroll); }
  int64_t tiles(int64_t batch) const { return batch * rowTiles * columnTiles; }
  int64_t packUnits() const { return packedBatches * depthBlocks * packGroups; }
};

// Splits `extent` into about `tiles` blocks of a multiple of `multiple`;
// gives the block and the blocks that cover the extent.
void splitExtent(int64_t extent, int64_t tiles, int64_t multiple,
                 int64_t &block, int64_t &count) {
  block = std::max<int64_t>(
      roundUp(ceilDivide(extent, std::max<int64_t>(tiles, 1)), multiple),
      multiple);
  count = ceilDivide(extent, block);
}

// The split of `extent` into the fewest blocks more than `count` (blocks
// of a multiple of `multiple`, at least `minimum`); false where none is.
bool splitFurther(int64_t extent, int64_t count, int64_t multiple,
                  int64_t minimum, int64_t &block, int64_t &blocks) {
  for (int64_t wanted = count + 1;; ++wanted) {
    splitExtent(extent, wanted, multiple, block, blocks);
    if (block < minimum || wanted > extent)
      return false;
    if (blocks > count)
      return true;
  }
}

GemmPlan planGemm(const GemmSpec &spec, const HostTarget &host) {
  GemmPlan plan;
  plan.lanes = std::max(host.vectorBits, 128) / 32;
  // Accumulators, the B vectors of one k step and the broadcast A element
  // fill the vector registers: 6 x 2 + 2 + 1 of AVX2's and SSE's 16,
  // 12 x 2 + 2 + 1 of AVX-512's 32. Two FMA pipes of latency 4 need at
  // least 8 independent accumulators.
  plan.rows = plan.lanes == 16 ? 12 : 6;
  plan.columnVectors = 2;
  // A KC x NR panel of B (16 KiB for AVX2) stays in L1 while the micro-
  // kernel sweeps an MC x KC block of A (144 KiB) held in L2; the packed
  // buffers take 144 + 384 KiB of stack at most.
  int64_t maxDepthBlock = 256;
  // On a pool of few threads, AVX-512's micro-tile is 6 x 64 over k blocks
  // of 128: 10 loads (4 of B, 6 broadcasts of A) feed its 24 FMAs where
  // 12 x 32 takes 14, and the 128 x 64 panel of B (32 KiB) stays in L1.
  // On the 16-core Xeon, 512x256 @ 256x{128..8192} and 512x688 @ 688x256
  // (a LLaMA-style MLP and head) ran 5-8% faster on 2 threads (the bench's
  // hand-written GPT and LLaMA-style rows 3-6%), -3 to +11% on 1 and -1 to
  // +13% on 4; on 8 and 16 the wider panels leave fewer tiles to share
  // (512x256 @ 256x688: -6% and -12%), so more threads keep 12 x 32.
  if (plan.lanes == 16 && spec.threads >= 1 && spec.threads <= 4) {
    plan.rows = 6;
    plan.columnVectors = 4;
    maxDepthBlock = 128;
  }
  plan.columns = plan.columnVectors * plan.lanes;
  // Tiles for many threads shrink to 48 rows and 64 columns at least: on
  // the 16-core Xeon 128x256 @ 256x1024 ran at 1160-1180 GFLOP/s with 64
  // columns, at 920-980 with 128 (fewer tiles than twice the threads).
  const int64_t maxRowBlock = 144, minRowBlock = 48;
  const int64_t maxColumnBlock = 384, minColumnBlock = 64;
  plan.depthBlocks = std::max<int64_t>(1, ceilDivide(spec.k, maxDepthBlock));
  plan.depthBlock = ceilDivide(spec.k, plan.depthBlocks);
  splitExtent(spec.m, ceilDivide(spec.m, maxRowBlock), plan.rows, plan.rowBlock,
              plan.rowBlocks);
  splitExtent(spec.n, ceilDivide(spec.n, maxColumnBlock), plan.columns,
              plan.columnBlock, plan.columnTiles);
  // Consecutive tiles of one column block share its packed B (a thread's
  // chunk packs each k block of B once), and A is read in place or packed
  // per column block. More tiles for the thread pool first take whole row
  // blocks per tile, then narrower columns (to at least 64), and only
  // then shorter row blocks (to at least 48 rows). A narrower column block
  // packs no more of B than before and at most one more MC x KC block of A
  // (none where A is read in place); a shorter row block packs the column
  // block's B once more. On the 16-core Xeon, columns before rows took
  // 128x256 @ 256x1024 from 179-187 to 192-197 GFLOP/s on 2 threads,
  // 128x768 @ 768x768 from 197-243 to 211-269, 512x256 @ 256x1024 from
  // 1016 to 1325 on 16 threads and 512x768 @ 768x3072 from 1207 to 1348.
  plan.rowTileBlocks = std::max<int64_t>(plan.rowBlocks, 1);
  plan.rowTiles = ceilDivide(plan.rowBlocks, plan.rowTileBlocks);
  // Threads take the tiles in chunks of equal counts, or one at a time
  // (equalChunks, ThreadPool.h), so a count of tiles that is not a multiple
  // of the threads leaves some idle at the end: on two threads 1024 x 1024 @
  // 1024 x 1024 in three tiles ran at 228 GFLOP/s, in six at 284. More tiles
  // until the threads are busy 95% of the time that the busiest takes (2048 x
  // 4096 @ 4096 x 4096 on two threads: 22 tiles, not 11).
  auto moreTiles = [&] {
    int64_t tiles = plan.tiles(spec.batch);
    if (tiles < spec.targetTiles)
      return true;
    if (spec.threads <= 1)
      return false;
    int64_t rounds = ceilDivide(tiles, spec.threads);
    return 100 * tiles < 95 * rounds * spec.threads;
  };
  while (moreTiles()) {
    if (plan.rowTileBlocks > 1) {
      // The next count of tiles that, split evenly, is more tiles.
      for (int64_t tiles = plan.rowTiles + 1;; ++tiles) {
        plan.rowTileBlocks = ceilDivide(plan.rowBlocks, tiles);
        if (ceilDivide(plan.rowBlocks, plan.rowTileBlocks) > plan.rowTiles)
          break;
      }
      plan.rowTiles = ceilDivide(plan.rowBlocks, plan.rowTileBlocks);
      continue;
    }
    int64_t rowBlock, rowBlocks, columnBlock, columnTiles;
    if (splitFurther(spec.n, plan.columnTiles, plan.columns, minColumnBlock,
                     columnBlock, columnTiles)) {
      plan.columnBlock = columnBlock;
      plan.columnTiles = columnTiles;
    } else if (splitFurther(spec.m, plan.rowBlocks, plan.rows, minRowBlock,
                            rowBlock, rowBlocks)) {
      plan.rowBlock = rowBlock;
      plan.rowBlocks = plan.rowTiles = rowBlocks;
    } else {
      break;
    }
  }
  // B packed ahead is read by every tile: the packing runs once, split
  // into about targetTiles units for a thread pool.
  if (spec.packedBSlot >= 0 && !spec.windowedB && spec.m > 0 && spec.n > 0 &&
      spec.k > 0 && spec.batch > 0) {
    plan.bPackedAhead = true;
    plan.packedBatches = spec.bBatch == 0 ? 1 : spec.batch;
    int64_t panels = ceilDivide(spec.n, plan.columns);
    plan.packedBlockFloats = plan.paddedDepthBlock() * panels * plan.columns;
    int64_t blocks = plan.packedBatches * plan.depthBlocks;
    int64_t groups =
        std::clamp<int64_t>(ceilDivide(spec.targetTiles, blocks), 1, panels);
    plan.packGroupPanels = ceilDivide(panels, groups);
    plan.packGroups = ceilDivide(panels, plan.packGroupPanels);
  }
  return plan;
}

// Whether the micro-kernel reads A where it is, unpacked: where k steps are
// contiguous (no transposes) and the rows of a panel spread over L1's sets
// (64-byte lines, 64 sets of 12 ways), at most 3 rows' lines to a set. Row
// strides of a multiple of 4 KiB put every row in one set: on the 16-core
// Xeon 1024x1024 @ 1024x1024 ran at 206 GFLOP/s on 2 threads in place and
// 255 packed; with 3 KiB strides (512x768 @ 768x3072) 269 in place and 220
// packed.
bool readsAInPlace(const GemmSpec &spec, const GemmPlan &plan) {
  if (spec.aCol != 1)
    return false;
  if (spec.aRow == 0) // every row the same
    return true;
  std::vector<int> perSet(64, 0);
  for (int64_t row = 0; row < plan.rows; ++row)
    if (++perSet[(row * std::abs(spec.aRow) * 4 / 64) % 64] > 3)
      return false;
  return true;
}

/// How one operand's block is read into packed panels: a panel is `width`
/// (MR or NR) elements across, one row of it per k step.
struct PanelLayout {
  int width = 0;
  int64_t widthStride = 0; // source elements between neighbours in a row
  int64_t depthStride = 0; // source elements between k steps
};

class GemmEmitter {
public:
  GemmEmitter(llvm::Module &module, const GemmSpec &spec,
              const HostTarget &host, const GemmEpilogue &epilogue)
      : module_(module), spec_(spec), host_(host), epilogue_(epilogue),
        context_(module.getContext()), builder_(context_),
        plan_(planGemm(spec, host)), float_(builder_.getFloatTy()),
        vector_(llvm::FixedVectorType::get(float_, plan_.lanes)) {}

  EmittedGemm emit(const std::string &name);

private:
  llvm::Value *constant(int64_t value) { return builder_.getInt64(value); }
  llvm::Value *element(llvm::Value *base, llvm::Value *offset) {
    return builder_.CreateGEP(float_, base, offset);
  }
  llvm::Value *element(llvm::Value *base, int64_t offset) {
    return element(base, constant(offset));
  }
  llvm::Value *minimum(llvm::Value *a, llvm::Value *b) {
    return builder_.CreateSelect(builder_.CreateICmpSLT(a, b), a, b);
  }
  /// ceil(value / divisor) of a non-negative value.
  llvm::Value *ceilingDivide(llvm::Value *value, int64_t divisor) {
    return builder_.CreateUDiv(builder_.CreateAdd(value, constant(divisor - 1)),
                               constant(divisor));
  }
  llvm::Value *maximum(llvm::Value *a, llvm::Value *b) {
    return builder_.CreateSelect(builder_.CreateICmpSLT(a, b), b, a);
  }
  llvm::Value *multiplyAdd(llvm::Value *a, llvm::Value *b, llvm::Value *c) {
    // fmuladd fuses where the target has FMA and stays a multiply and an
    // add elsewhere (an ahead-of-time target without FMA).
    return builder_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {a->getType()},
                                    {a, b, c});
  }
  llvm::Value *loadFloats(llvm::Value *pointer, int count,
                          llvm::Align align = llvm::Align(4)) {
    llvm::Type *type =
        count == 1 ? float_ : llvm::FixedVectorType::get(float_, count);
    return builder_.CreateAlignedLoad(type, pointer, align);
  }
  llvm::Value *firstLanes(llvm::Value *vector, int count);
  std::vector<llvm::Value *>
  transposeInLanes(const std::vector<llvm::Value *> &rows);

  /// Creates `name` with the GEMM's arguments and enters it.
  void beginFunction(const std::string &name);
  llvm::Value *bufferPointer(int slot, const char *label);
  void emitPackB(const std::string &name);
  /// Sets the k block's depth and padded depth; gives its first k step.
  llvm::Value *enterDepthBlock(llvm::Value *block);
  /// The panels of B packed ahead: batch `batch` of B (0 where B is
  /// broadcast), k block `block`, from column `column` on.
  llvm::Value *packedPanels(llvm::Value *batch, llvm::Value *block,
                            llvm::Value *column);
  void emitGroup(llvm::Value *group, llvm::Value *begin, llvm::Value *end);
  void emitDepthBlock(llvm::Value *block);
  /// Rows [start, start + blockRows) of the current tile (multiples of MR
  /// apart but at the matrix's end).
  void emitRowBlock(llvm::Value *start, llvm::Value *blockRows);
  /// The first of `part` of `count` nearly equal shares of `panels` panels
  /// of `width` (count and part may vary at run time).
  llvm::Value *shareStart(llvm::Value *part, llvm::Value *count,
                          llvm::Value *panels, int width);
  /// Where the shares before `part` end, at most `extent`.
  llvm::Value *shareEnd(llvm::Value *part, llvm::Value *count,
                        llvm::Value *panels, int width, llvm::Value *extent) {
    return minimum(extent, shareStart(part, count, panels, width));
  }
  void emitPack(const PanelLayout &layout, llvm::Value *source,
                llvm::Value *packed, llvm::Value *extent, bool alwaysFull);
  /// Packs the tile's B of the k block from `depthStart` where B is given
  /// as windows (spec.windowedB).
  void emitWindowPack(llvm::Value *depthStart);
  void emitTransposePanel(const PanelLayout &layout, llvm::Value *source,
                          llvm::Value *packed, llvm::Value *depth);
  void emitScalarPanel(const PanelLayout &layout, llvm::Value *source,
                       llvm::Value *packed, llvm::Value *valid,
                       llvm::Value *depth, llvm::Value *paddedDepth);
  void emitZeroRows(int width, llvm::Value *packed, llvm::Value *from,
                    llvm::Value *to);
  /// Where the micro-kernel reads A: element (row r, k step s) of its
  /// panel at rows[r] + s * stepStride.
  struct PanelOfA {
    std::vector<llvm::Value *> rows;
    int64_t stepStride;
  };
  /// The panel of `rows` rows from `first` on, `stride` elements apart.
  PanelOfA panelOfA(int rows, llvm::Value *first, int64_t stride,
                    int64_t stepStride) {
    PanelOfA panel{{}, stepStride};
    for (int row = 0; row < rows; ++row)
      panel.rows.push_back(element(first, row * stride));
    return panel;
  }
  std::vector<llvm::Value *> emitMicroKernel(const PanelOfA &a,
                                             llvm::Value *packedB,
                                             llvm::Value *wholeDepth,
                                             llvm::Value *depth);
  /// C's element at (row, column) of the current tile.
  llvm::Value *elementOfC(llvm::Value *row, llvm::Value *column);
  /// Asks for the lines of C that the micro-tile at (row, column) of the
  /// tile will write, ahead of its k loop.
  void prefetchMicroTileOfC(int rows, llvm::Value *row, llvm::Value *column);
  void emitMicroSteps(std::vector<llvm::Value *> &accumulators,
                      const PanelOfA &a, llvm::Value *packedB,
                      llvm::Value *start, llvm::Value *end, int unroll);
  /// Writes the `rows` rows of a micro-tile (its accumulators, with a cheap
  /// epilogue applied in the last k block) to rows [row, row + rows) of C,
  /// `validColumns` of its columns.
  void emitWrite(const std::vector<llvm::Value *> &accumulators, int rows,
                 llvm::Value *row, llvm::Value *column,
                 llvm::Value *validColumns, llvm::Value *first,
                 llvm::Value *last);
  void emitVectorWrite(const std::vector<llvm::Value *> &accumulators, int rows,
                       llvm::Value *row, llvm::Value *column,
                       llvm::Value *first, llvm::Value *last);
  /// C's new value at (row, column) of the tile, from `accumulator`.
  llvm::Value *combine(llvm::Value *accumulator, llvm::Value *pointer,
                       llvm::Value *bias, llvm::Value *first, llvm::Value *last,
                       llvm::Value *row, llvm::Value *column);
  void emitScalarWrite(const std::vector<llvm::Value *> &accumulators, int rows,
                       llvm::Value *row, llvm::Value *column,
                       llvm::Value *validColumns, llvm::Value *first,
                       llvm::Value *last);
  /// `then` where `condition` holds at run time, else `otherwise`, in
  /// blocks named after `name`; the builder after both.
  void emitIfElse(llvm::Value *condition, const char *name,
                  const std::function<void()> &then,
                  const std::function<void()> &otherwise);
  /// `vectors` where the micro-tile's columns are whole vectors in C (its
  /// rows contiguous, all `plan_.columns` valid), else `elements`; a branch
  /// on validColumns where either can be.
  void emitByWidth(llvm::Value *validColumns,
                   const std::function<void()> &vectors,
                   const std::function<void()> &elements);
  /// After column panel `columnPanel` of `columnPanels` of the row block
  /// (`rows` rows from `row`): where it ends a strip of columns (or the
  /// tile), the costly epilogue (spec.costlyEpilogue) over the strip's
  /// elements of C in the last k block: loads each, applies it, stores it.
  void emitEpilogueOfStrip(llvm::Value *columnPanel, llvm::Value *columnPanels,
                           llvm::Value *rows, llvm::Value *row,
                           llvm::Value *stripEnd);
  bool epilogueAfterStore() const { return epilogue_ && spec_.costlyEpilogue; }
  bool usesBias() const { return spec_.hasBias && spec_.beta != 0.0; }
  llvm::Value *loadBias(llvm::Value *row, llvm::Value *column, int lanes);
  llvm::Value *applyEpilogue(llvm::Value *value, llvm::Value *bias);

  llvm::Module &module_;
  const GemmSpec &spec_;
  const HostTarget &host_;
  const GemmEpilogue &epilogue_;
  llvm::LLVMContext &context_;
  llvm::IRBuilder<> builder_;
  GemmPlan plan_;
  llvm::Type *float_;
  llvm::FixedVectorType *vector_;
  // A read in place by the micro-kernel (no packing and no transposes):
  // readsAInPlace.
  bool directA_ = false;

  llvm::Function *function_ = nullptr;
  llvm::Value *a_ = nullptr, *b_ = nullptr, *c_ = nullptr, *bias_ = nullptr;
  llvm::Value *packedA_ = nullptr, *packedB_ = nullptr, *scratch_ = nullptr;
  // B packed ahead (plan_.bPackedAhead).
  llvm::Value *aheadB_ = nullptr;
  // The current group of tiles: its batch, first row and first column.
  llvm::Value *groupBatch_ = nullptr, *groupRow_ = nullptr,
              *groupColumn_ = nullptr;
  // The current tile: its operands' first elements, its extent in C.
  llvm::Value *tileA_ = nullptr, *tileB_ = nullptr, *tileC_ = nullptr,
              *tileBias_ = nullptr, *tileRows_ = nullptr,
              *tileColumns_ = nullptr;
  // The current k block: its extent, padded to the micro-kernel's unroll,
  // A's first element in it, and whether it is the first and last.
  llvm::Value *depth_ = nullptr, *paddedDepth_ = nullptr, *blockA_ = nullptr,
              *first_ = nullptr, *last_ = nullptr;
};

llvm::Value *GemmEmitter::firstLanes(llvm::Value *vector, int count) {
  int lanes = static_cast<int>(
      llvm::cast<llvm::FixedVectorType>(vector->getType())->getNumElements());
  if (count == lanes)
    return vector;
  if (count == 1)
    return builder_.CreateExtractElement(vector, uint64_t(0));
  std::vector<int> mask(count);
  for (int lane = 0; lane < count; ++lane)
    mask[lane] = lane;
  return builder_.CreateShuffleVector(vector, mask);
}

// Transposes 4 x 4 blocks within each 128-bit lane of `rows` (4 or 8
// vectors of as many lanes; poison rows allowed): the unpcklps/unpckhps and
// shufps steps of the classic SSE/AVX transpose, one instruction each.
// Result c holds lane c % 4 of each lane's block of rows 4 * (c / 4) to
// 4 * (c / 4) + 3: with 8 lanes, a full transpose when row i < 4 holds the
// low halves of source rows i and i + 4 and row i + 4 their high halves.
std::vector<llvm::Value *>
GemmEmitter::transposeInLanes(const std::vector<llvm::Value *> &rows) {
  int lanes = static_cast<int>(rows.size());
  // A 4-lane pattern over x (0-3) and y (4-7), repeated for each lane.
  auto mask = [&](std::initializer_list<int> pattern) {
    std::vector<int> result;
    for (int block = 0; block < lanes; block += 4)
      for (int element : pattern)
        result.push_back(element < 4 ? block + element
                                     : lanes + block + element - 4);
    return result;
  };
  std::vector<int> unpackLow = mask({0, 4, 1, 5}),
                   unpackHigh = mask({2, 6, 3, 7}),
                   lowPairs = mask({0, 1, 4, 5}),
                   highPairs = mask({2, 3, 6, 7});
  std::vector<llvm::Value *> columns(lanes);
  for (int group = 0; group < lanes; group += 4) {
    auto shuffle = [&](llvm::Value *x, llvm::Value *y,
                       const std::vector<int> &pattern) {
      return builder_.CreateShuffleVector(x, y, pattern);
    };
    llvm::Value *low01 = shuffle(rows[group], rows[group + 1], unpackLow);
    llvm::Value *high01 = shuffle(rows[group], rows[group + 1], unpackHigh);
    llvm::Value *low23 = shuffle(rows[group + 2], rows[group + 3], unpackLow);
    llvm::Value *high23 = shuffle(rows[group + 2], rows[group + 3], unpackHigh);
    columns[group] = shuffle(low01, low23, lowPairs);
    columns[group + 1] = shuffle(low01, low23, highPairs);
    columns[group + 2] = shuffle(high01, high23, lowPairs);
    columns[group + 3] = shuffle(high01, high23, highPairs);
  }
  return columns;
}

void GemmEmitter::beginFunction(const std::string &name) {
  llvm::Type *pointer = builder_.getPtrTy();
  llvm::Type *int64 = builder_.getInt64Ty();
  auto *type = llvm::FunctionType::get(builder_.getVoidTy(),
                                       {pointer, int64, int64}, false);
  function_ = llvm::Function::Create(type, llvm::Function::ExternalLinkage,
                                     name, module_);
  setTargetAttributes(*function_, host_);
  function_->setDoesNotThrow();
  function_->getArg(0)->setName("buffers");
  function_->getArg(1)->setName("begin");
  function_->getArg(2)->setName("end");
  builder_.SetInsertPoint(
      llvm::BasicBlock::Create(context_, "entry", function_));
}

llvm::Value *GemmEmitter::bufferPointer(int slot, const char *label) {
  llvm::Type *pointer = builder_.getPtrTy();
  return builder_.CreateLoad(
      pointer, builder_.CreateConstGEP1_64(pointer, function_->getArg(0), slot),
      label);
}

llvm::Value *GemmEmitter::packedPanels(llvm::Value *batch, llvm::Value *block,
                                       llvm::Value *column) {
  llvm::Value *blockIndex = builder_.CreateAdd(
      builder_.CreateMul(batch, constant(plan_.depthBlocks)), block);
  llvm::Value *offset = builder_.CreateAdd(
      builder_.CreateMul(blockIndex, constant(plan_.packedBlockFloats)),
      builder_.CreateMul(column, paddedDepth_));
  return builder_.CreateInBoundsGEP(float_, aheadB_, offset, "packed_panels");
}

void GemmEmitter::emitPackB(const std::string &name) {
  beginFunction(name);
  b_ = bufferPointer(1, "b");
  aheadB_ = bufferPointer(spec_.packedBSlot, "packed_b");
  // Unit u: group u % packGroups of column panels, of k block
  // (u / packGroups) % depthBlocks, of batch u / (packGroups * depthBlocks).
  int64_t groupColumns = plan_.packGroupPanels * plan_.columns;
  emitCountedLoop(
      builder_, function_->getArg(1), function_->getArg(2), 1,
      [&](llvm::Value *unit) {
        llvm::Value *group =
            builder_.CreateURem(unit, constant(plan_.packGroups));
        llvm::Value *rest =
            builder_.CreateUDiv(unit, constant(plan_.packGroups));
        llvm::Value *block =
            builder_.CreateURem(rest, constant(plan_.depthBlocks));
        llvm::Value *batch =
            builder_.CreateUDiv(rest, constant(plan_.depthBlocks));
        llvm::Value *depthStart = enterDepthBlock(block);
        llvm::Value *column = builder_.CreateMul(group, constant(groupColumns));
        llvm::Value *source = element(
            b_, builder_.CreateAdd(
                    builder_.CreateAdd(
                        builder_.CreateMul(batch, constant(spec_.bBatch)),
                        builder_.CreateMul(depthStart, constant(spec_.bRow))),
                    builder_.CreateMul(column, constant(spec_.bCol))));
        llvm::Value *columns =
            minimum(constant(groupColumns),
                    builder_.CreateSub(constant(spec_.n), column));
        emitPack({plan_.columns, spec_.bCol, spec_.bRow}, source,
                 packedPanels(batch, block, column), columns,
                 spec_.n % plan_.columns == 0);
      });
  builder_.CreateRetVoid();
}

EmittedGemm GemmEmitter::emit(const std::string &name) {
  EmittedGemm result;
  bool empty = spec_.m <= 0 || spec_.n <= 0 || spec_.batch <= 0;
  if (plan_.bPackedAhead) {
    emitPackB(name + "_pack_b");
    result.packB = function_;
    result.packRange = plan_.packUnits();
    result.packedBBytes =
        4 * plan_.packedBlockFloats * plan_.depthBlocks * plan_.packedBatches;
  }
  beginFunction(name);
  // The packing buffers make a frame of hundreds of KiB: probing it page by
  // page turns a too-small thread stack into a clean fault.
  function_->addFnAttr("probe-stack", "inline-asm");
  result.function = function_;
  result.parallelRange = empty ? 0 : plan_.tiles(spec_.batch);
  result.work = spec_.batch * spec_.m * spec_.n * std::max<int64_t>(spec_.k, 1);
  if (result.parallelRange <= 0) {
    builder_.CreateRetVoid();
    return result;
  }
  a_ = bufferPointer(0, "a");
  b_ = bufferPointer(1, "b");
  c_ = bufferPointer(2, "c");
  if (usesBias())
    bias_ = bufferPointer(3, "bias");
  if (plan_.bPackedAhead)
    aheadB_ = bufferPointer(spec_.packedBSlot, "packed_b");
  auto stackFloats = [&](int64_t count, const char *label) {
    llvm::AllocaInst *buffer = builder_.CreateAlloca(
        llvm::ArrayType::get(float_, std::max<int64_t>(count, 1)), nullptr,
        label);
    buffer->setAlignment(llvm::Align(64));
    result.stackBytes += 4 * std::max<int64_t>(count, 1);
    return buffer;
  };
  int64_t paddedDepth = plan_.paddedDepthBlock();
  directA_ = readsAInPlace(spec_, plan_);
  if (!directA_)
    packedA_ = stackFloats(plan_.rowBlock * paddedDepth, "packed_a");
  if (!plan_.bPackedAhead)
    packedB_ = stackFloats(plan_.columnBlock * paddedDepth, "packed_b");
  scratch_ = stackFloats(plan_.rows * plan_.columns, "edge_tile");
  // Tiles [begin, end) as groups of consecutive tiles in one column block
  // of one batch: a group packs each k block of B once for all its rows.
  llvm::Value *begin = function_->getArg(1), *end = function_->getArg(2);
  llvm::Value *rowTiles = constant(plan_.rowTiles);
  emitCountedLoop(builder_, builder_.CreateUDiv(begin, rowTiles),
                  ceilingDivide(end, plan_.rowTiles), 1,
                  [&](llvm::Value *group) { emitGroup(group, begin, end); });
  builder_.CreateRetVoid();
  return result;
}

void GemmEmitter::emitGroup(llvm::Value *group, llvm::Value *begin,
                            llvm::Value *end) {
  // Tiles run batch-major, then column blocks, then row tiles: consecutive
  // tiles (one thread's chunk) share a column block of B.
  llvm::Value *batch = builder_.CreateUDiv(group, constant(plan_.columnTiles));
  llvm::Value *columnTile =
      builder_.CreateURem(group, constant(plan_.columnTiles));
  llvm::Value *groupStart = builder_.CreateMul(group, constant(plan_.rowTiles));
  llvm::Value *firstRowTile =
      builder_.CreateSub(maximum(begin, groupStart), groupStart);
  llvm::Value *endRowTile = builder_.CreateSub(
      minimum(end, builder_.CreateAdd(groupStart, constant(plan_.rowTiles))),
      groupStart);
  // Tiles split the panels of rows and of columns evenly (in whole panels,
  // so that only the matrix's last panel is partial): 296 rows in four
  // tiles are 72, 72, 72 and 80 rows, not 84, 84, 84 and 44.
  llvm::Value *rowTileCount = constant(plan_.rowTiles);
  llvm::Value *rowPanels = constant(ceilDivide(spec_.m, plan_.rows));
  llvm::Value *rowStart =
      shareStart(firstRowTile, rowTileCount, rowPanels, plan_.rows);
  llvm::Value *rowEnd = shareEnd(endRowTile, rowTileCount, rowPanels,
                                 plan_.rows, constant(spec_.m));
  llvm::Value *columnTileCount = constant(plan_.columnTiles);
  llvm::Value *columnPanels = constant(ceilDivide(spec_.n, plan_.columns));
  llvm::Value *columnStart =
      shareStart(columnTile, columnTileCount, columnPanels, plan_.columns);
  llvm::Value *columnEnd =
      shareEnd(builder_.CreateAdd(columnTile, constant(1)), columnTileCount,
               columnPanels, plan_.columns, constant(spec_.n));
  tileRows_ = builder_.CreateSub(rowEnd, rowStart, "group_rows");
  groupBatch_ = batch;
  groupRow_ = rowStart;
  groupColumn_ = columnStart;
  tileColumns_ = builder_.CreateSub(columnEnd, columnStart, "tile_columns");
  auto offset = [&](int64_t batchStride, int64_t rowStride,
                    int64_t columnStride, llvm::Value *columnIndex) {
    llvm::Value *sum =
        builder_.CreateMul(batch, constant(batchStride)); // b * batch stride
    sum = builder_.CreateAdd(sum,
                             builder_.CreateMul(rowStart, constant(rowStride)));
    return builder_.CreateAdd(
        sum, builder_.CreateMul(columnIndex, constant(columnStride)));
  };
  // A's group starts at row rowStart, k 0; B's at k 0, column columnStart.
  tileA_ = element(a_, offset(spec_.aBatch, spec_.aRow, 0, constant(0)));
  tileB_ = element(b_, offset(spec_.bBatch, 0, spec_.bCol, columnStart));
  tileC_ =
      element(c_, offset(spec_.cBatch, spec_.cRow, spec_.cCol, columnStart));
  if (bias_)
    tileBias_ = element(bias_, offset(spec_.biasBatch, spec_.biasRow,
                                      spec_.biasCol, columnStart));
  if (plan_.depthBlocks == 1) {
    emitDepthBlock(constant(0));
    return;
  }
  emitCountedLoop(builder_, constant(0), constant(plan_.depthBlocks), 1,
                  [&](llvm::Value *block) { emitDepthBlock(block); });
}

llvm::Value *GemmEmitter::shareStart(llvm::Value *part, llvm::Value *count,
                                     llvm::Value *panels, int width) {
  return builder_.CreateMul(
      builder_.CreateUDiv(builder_.CreateMul(part, panels), count),
      constant(width));
}

llvm::Value *GemmEmitter::enterDepthBlock(llvm::Value *block) {
  llvm::Value *depthStart =
      builder_.CreateMul(block, constant(plan_.depthBlock));
  depth_ = plan_.depthBlocks == 1
               ? constant(spec_.k)
               : minimum(constant(plan_.depthBlock),
                         builder_.CreateSub(constant(spec_.k), depthStart));
  paddedDepth_ =
      builder_.CreateMul(ceilingDivide(depth_, plan_.depthUnroll),
                         constant(plan_.depthUnroll), "padded_depth");
  return depthStart;
}

void GemmEmitter::emitDepthBlock(llvm::Value *block) {
  llvm::Value *depthStart = enterDepthBlock(block);
  if (plan_.bPackedAhead)
    packedB_ = packedPanels(spec_.bBatch == 0 ? constant(0) : groupBatch_,
                            block, groupColumn_);
  else if (spec_.k > 0 && spec_.windowedB)
    emitWindowPack(depthStart);
  else if (spec_.k > 0)
    emitPack(
        {plan_.columns, spec_.bCol, spec_.bRow},
        element(tileB_, builder_.CreateMul(depthStart, constant(spec_.bRow))),
        packedB_, tileColumns_, spec_.n % plan_.columns == 0);
  blockA_ =
      element(tileA_, builder_.CreateMul(depthStart, constant(spec_.aCol)));
  first_ = plan_.depthBlocks == 1
               ? builder_.getTrue()
               : builder_.CreateICmpEQ(block, constant(0), "first");
  last_ = plan_.depthBlocks == 1
              ? builder_.getTrue()
              : builder_.CreateICmpEQ(block, constant(plan_.depthBlocks - 1),
                                      "last");
  if (plan_.rowBlocks == 1) {
    emitRowBlock(constant(0), tileRows_);
    return;
  }
  // The tile's rows in the fewest blocks of at most MC rows, as even as
  // whole panels allow.
  llvm::Value *tilePanels = ceilingDivide(tileRows_, plan_.rows);
  llvm::Value *rowBlocks =
      ceilingDivide(tilePanels, plan_.rowBlock / plan_.rows);
  emitCountedLoop(builder_, constant(0), rowBlocks, 1,
                  [&](llvm::Value *rowBlock) {
                    llvm::Value *start =
                        shareStart(rowBlock, rowBlocks, tilePanels, plan_.rows);
                    llvm::Value *end =
                        shareEnd(builder_.CreateAdd(rowBlock, constant(1)),
                                 rowBlocks, tilePanels, plan_.rows, tileRows_);
                    emitRowBlock(start, builder_.CreateSub(end, start));
                  });
}

void GemmEmitter::emitRowBlock(llvm::Value *rowStart, llvm::Value *blockRows) {
  const int rows = plan_.rows, columns = plan_.columns;
  llvm::Value *sourceA =
      element(blockA_, builder_.CreateMul(rowStart, constant(spec_.aRow)));
  // Only the matrix's last panel of rows can be partial, of `edgeRows`
  // rows: the micro-kernel computes just those (for 256 rows in panels of
  // 12, the last 4 rows cost a third of a panel, not a whole one).
  const int edgeRows = static_cast<int>(spec_.m % rows);
  if (spec_.k > 0 && !directA_)
    emitPack({rows, spec_.aRow, spec_.aCol}, sourceA, packedA_, blockRows,
             edgeRows == 0);
  llvm::Value *rowPanels = ceilingDivide(blockRows, rows);
  llvm::Value *columnPanels = ceilingDivide(tileColumns_, columns);
  // Packed panels run the micro-kernel over the padded depth; A in place
  // over whole unrolled steps, then one step at a time where a k block
  // can end between them.
  const int unroll = plan_.depthUnroll;
  bool wholeSteps = spec_.k % unroll == 0 && plan_.depthBlock % unroll == 0;
  llvm::Value *wholeDepth =
      !directA_ ? paddedDepth_
      : wholeSteps
          ? depth_
          : builder_.CreateMul(builder_.CreateUDiv(depth_, constant(unroll)),
                               constant(unroll));
  // Column panels outside: one KC x NR panel of B stays in L1 while the
  // row panels of A stream past it from L2.
  emitCountedLoop(
      builder_, constant(0), columnPanels, 1, [&](llvm::Value *columnPanel) {
        llvm::Value *column =
            builder_.CreateMul(columnPanel, constant(columns), "column");
        llvm::Value *packedB = builder_.CreateInBoundsGEP(
            float_, packedB_, builder_.CreateMul(column, paddedDepth_));
        llvm::Value *validColumns = minimum(
            constant(columns), builder_.CreateSub(tileColumns_, column));
        emitCountedLoop(
            builder_, constant(0), rowPanels, 1, [&](llvm::Value *rowPanel) {
              llvm::Value *row =
                  builder_.CreateMul(rowPanel, constant(rows), "row");
              auto microTile = [&](int panelRows) {
                PanelOfA panel =
                    directA_
                        ? panelOfA(
                              panelRows,
                              element(sourceA, builder_.CreateMul(
                                                   row, constant(spec_.aRow))),
                              spec_.aRow, 1)
                        : panelOfA(panelRows,
                                   builder_.CreateInBoundsGEP(
                                       float_, packedA_,
                                       builder_.CreateMul(row, paddedDepth_)),
                                   1, rows);
                prefetchMicroTileOfC(panelRows,
                                     builder_.CreateAdd(rowStart, row), column);
                std::vector<llvm::Value *> accumulators =
                    emitMicroKernel(panel, packedB, wholeDepth,
                                    directA_ ? depth_ : paddedDepth_);
                emitWrite(accumulators, panelRows,
                          builder_.CreateAdd(rowStart, row), column,
                          validColumns, first_, last_);
              };
              if (edgeRows == 0 || spec_.m < rows) {
                microTile(edgeRows == 0 ? rows : edgeRows);
                return;
              }
              emitIfElse(
                  builder_.CreateICmpULE(
                      builder_.CreateAdd(row, constant(rows)), blockRows),
                  "whole_panel", [&] { microTile(rows); },
                  [&] { microTile(edgeRows); });
            });
        if (epilogueAfterStore())
          emitEpilogueOfStrip(columnPanel, columnPanels, blockRows, rowStart,
                              builder_.CreateAdd(column, validColumns));
      });
}

// A costly epilogue (combine leaves it out of the stores) runs once the row
// block's panels of a strip of columns are stored, row by row over the
// strip: rows of 1 KiB that the prefetchers follow in C and in the
// epilogue's own operands (a SiLU gate's other product), over a strip that
// stays in L2. On the 16-core Xeon, 2 threads, what the epilogue added to
// 512x256 @ 256x688 with silu(gate) * it: 291-364 us run over each micro-
// tile after its stores (before), 292-407 over each column panel, 222-228
// over strips of 256 columns, 242-289 over whole rows; GELU over 512x256 @
// 256x1024: 351, 368-399, 332-349, 299-302 (the same kernels stand alone:
// 126 and 160). Whole vectors come first in a partial strip: 688 columns
// end in a panel of 16 that went element by element.
void GemmEmitter::emitEpilogueOfStrip(llvm::Value *columnPanel,
                                      llvm::Value *columnPanels,
                                      llvm::Value *rows, llvm::Value *row,
                                      llvm::Value *stripEnd) {
  const int64_t stripPanels =
      std::max(1, kEpilogueStripColumns / plan_.columns);
  llvm::Value *panelInStrip =
      builder_.CreateURem(columnPanel, constant(stripPanels));
  llvm::Value *next = builder_.CreateAdd(columnPanel, constant(1));
  llvm::Value *ends = builder_.CreateOr(
      builder_.CreateICmpEQ(panelInStrip, constant(stripPanels - 1)),
      builder_.CreateICmpEQ(next, columnPanels));
  auto *apply = llvm::BasicBlock::Create(context_, "epilogue", function_);
  auto *done = llvm::BasicBlock::Create(context_, "epilogue_done", function_);
  builder_.CreateCondBr(builder_.CreateAnd(ends, last_), apply, done);
  builder_.SetInsertPoint(apply);
  llvm::Value *stripStart = builder_.CreateMul(
      builder_.CreateSub(columnPanel, panelInStrip), constant(plan_.columns));
  auto finish = [&](llvm::Value *cRow, llvm::Value *cColumn, int lanes) {
    llvm::Value *pointer = elementOfC(cRow, cColumn);
    llvm::Value *finished =
        epilogue_(builder_, function_->getArg(0), loadFloats(pointer, lanes),
                  groupBatch_, builder_.CreateAdd(groupRow_, cRow),
                  builder_.CreateAdd(groupColumn_, cColumn), lanes);
    builder_.CreateAlignedStore(finished, pointer, llvm::Align(4));
  };
  emitCountedLoop(builder_, constant(0), rows, 1, [&](llvm::Value *rowIndex) {
    llvm::Value *cRow = builder_.CreateAdd(row, rowIndex);
    llvm::Value *vectors = stripStart;
    if (spec_.cCol == 1) {
      vectors = vectorEnd(builder_, stripStart, stripEnd, plan_.lanes);
      emitCountedLoop(
          builder_, stripStart, vectors, plan_.lanes,
          [&](llvm::Value *column) { finish(cRow, column, plan_.lanes); });
    }
    emitCountedLoop(builder_, vectors, stripEnd, 1,
                    [&](llvm::Value *column) { finish(cRow, column, 1); });
  });
  builder_.CreateBr(done);
  builder_.SetInsertPoint(done);
}

void GemmEmitter::emitPack(const PanelLayout &layout, llvm::Value *source,
                           llvm::Value *packed, llvm::Value *extent,
                           bool alwaysFull) {
  const int width = layout.width;
  llvm::Value *depth = depth_, *paddedDepth = paddedDepth_;
  // Rows of a panel contiguous in the source (B row-major, A column-major)
  // copy as vectors; k contiguous (A row-major, a Linear weight as B)
  // transposes lanes x lanes blocks in registers; anything else is scalar,
  // as is a last, partial panel.
  bool copy = layout.widthStride == 1;
  bool transposed = !copy && layout.depthStride == 1;
  auto panelAt = [&](llvm::Value *panel) {
    return builder_.CreateInBoundsGEP(
        float_, packed,
        builder_.CreateMul(builder_.CreateMul(panel, constant(width)),
                           paddedDepth));
  };
  auto sourceAt = [&](llvm::Value *panel) {
    return element(source, builder_.CreateMul(
                               panel, constant(width * layout.widthStride)));
  };
  llvm::Value *fullPanels = constant(0);
  if (copy || transposed)
    fullPanels = builder_.CreateUDiv(extent, constant(width), "full_panels");
  if (copy) {
    // Source row by source row, across every panel: the reads stream
    // along rows of the source rather than stride down its columns.
    emitCountedLoop(builder_, constant(0), depth, 1, [&](llvm::Value *step) {
      llvm::Value *from = element(
          source, builder_.CreateMul(step, constant(layout.depthStride)));
      llvm::Value *to = builder_.CreateInBoundsGEP(
          float_, packed, builder_.CreateMul(step, constant(width)));
      emitCountedLoop(
          builder_, constant(0), fullPanels, 1, [&](llvm::Value *panel) {
            llvm::Value *row = loadFloats(
                element(from, builder_.CreateMul(panel, constant(width))),
                width);
            builder_.CreateAlignedStore(
                row,
                builder_.CreateInBoundsGEP(
                    float_, to,
                    builder_.CreateMul(
                        builder_.CreateMul(panel, constant(width)),
                        paddedDepth)),
                llvm::Align(4));
          });
    });
  }
  if (copy || transposed)
    emitCountedLoop(
        builder_, constant(0), fullPanels, 1, [&](llvm::Value *panel) {
          if (transposed)
            emitTransposePanel(layout, sourceAt(panel), panelAt(panel), depth);
          emitZeroRows(width, panelAt(panel), depth, paddedDepth);
        });
  if ((copy || transposed) && alwaysFull)
    return;
  llvm::Value *panels = ceilingDivide(extent, width);
  emitCountedLoop(builder_, fullPanels, panels, 1, [&](llvm::Value *panel) {
    llvm::Value *valid = minimum(
        constant(width),
        builder_.CreateSub(extent, builder_.CreateMul(panel, constant(width))));
    emitScalarPanel(layout, sourceAt(panel), panelAt(panel), valid, depth,
                    paddedDepth);
  });
}

void GemmEmitter::emitWindowPack(llvm::Value *depthStart) {
  // Per panel, once per k block: each lane's source offset and its parts
  // of the ranges (a lane past the tile's columns fails the first range),
  // and whether the lanes are consecutive in the source (a window row of a
  // stride-1 convolution: masked loads, else masked gathers). Then per k
  // step, its part of the offset and of the ranges (digits by udiv and
  // urem by constants) once for all the tile's panels.
  const WindowedOperand &window = *spec_.windowedB;
  const int lanes = plan_.lanes, width = plan_.columns,
            vectors = plan_.columnVectors;
  const size_t ranges = std::max<size_t>(window.ranges.size(), 1);
  llvm::Type *int32 = builder_.getInt32Ty();
  auto *laneType = llvm::FixedVectorType::get(int32, lanes);
  auto splat = [&](llvm::Value *scalar) {
    return builder_.CreateVectorSplat(lanes,
                                      builder_.CreateTrunc(scalar, int32));
  };
  auto lanesOf = [&](int64_t value) -> llvm::Value * {
    return llvm::ConstantVector::getSplat(
        llvm::ElementCount::getFixed(lanes),
        llvm::ConstantInt::get(int32, static_cast<uint64_t>(value), true));
  };
  auto scalarOf = [&](int64_t value) -> llvm::Value * {
    return constant(value);
  };
  auto iota = [&](int64_t start) {
    std::vector<llvm::Constant *> values;
    for (int lane = 0; lane < lanes; ++lane)
      values.push_back(llvm::ConstantInt::get(int32, start + lane));
    return llvm::ConstantVector::get(values);
  };
  // The digits of `flat` over `extents` (row-major), on a scalar or lanes.
  auto digitsOf = [&](llvm::Value *flat, const std::vector<int64_t> &extents,
                      const std::function<llvm::Value *(int64_t)> &of) {
    std::vector<llvm::Value *> digits(extents.size());
    for (size_t d = extents.size(); d-- > 1;) {
      digits[d] = builder_.CreateURem(flat, of(extents[d]));
      flat = builder_.CreateUDiv(flat, of(extents[d]));
    }
    if (!digits.empty())
      digits[0] = flat;
    return digits;
  };
  auto dot = [&](const std::vector<llvm::Value *> &digits,
                 const std::vector<int64_t> &weights, llvm::Value *sum,
                 const std::function<llvm::Value *(int64_t)> &of) {
    for (size_t d = 0; d < digits.size(); ++d)
      if (weights[d] != 0)
        sum = builder_.CreateAdd(
            sum, weights[d] == 1
                     ? digits[d]
                     : builder_.CreateMul(digits[d], of(weights[d])));
    return sum;
  };
  // Without ranges, one that only the tile's columns pass.
  std::vector<WindowedOperand::Range> bounds = window.ranges;
  if (bounds.empty())
    bounds.push_back({std::vector<int64_t>(window.depthExtents.size(), 0),
                      std::vector<int64_t>(window.columnExtents.size(), 0), 0,
                      1});
  // The lane tables: offsets, parts of each range, per panel and vector;
  // per panel whether its lanes are consecutive.
  const int64_t maxPanels = ceilDivide(plan_.columnBlock, width);
  auto table = [&](llvm::Type *type, int64_t count, const char *label) {
    builder_.SetInsertPoint(&function_->getEntryBlock(),
                            function_->getEntryBlock().begin());
    llvm::AllocaInst *alloca = builder_.CreateAlloca(
        llvm::ArrayType::get(type, count), nullptr, label);
    alloca->setAlignment(llvm::Align(64));
    return alloca;
  };
  auto resume = builder_.saveIP();
  llvm::Value *offsetTable =
      table(laneType, maxPanels * vectors, "window_offsets");
  llvm::Value *partTable =
      table(laneType, maxPanels * vectors * ranges, "window_parts");
  llvm::Value *consecutiveTable =
      table(builder_.getInt8Ty(), maxPanels, "window_consecutive");
  builder_.restoreIP(resume);
  // Vector `vector` of panel `panel` in the offsets, and its part of range
  // r in the parts.
  auto offsetsAt = [&](llvm::Value *panel, int vector) {
    return builder_.CreateInBoundsGEP(
        laneType, offsetTable,
        builder_.CreateAdd(builder_.CreateMul(panel, constant(vectors)),
                           constant(vector)));
  };
  auto partAt = [&](llvm::Value *panel, int vector, size_t r) {
    return builder_.CreateInBoundsGEP(
        laneType, partTable,
        builder_.CreateAdd(
            builder_.CreateMul(panel, constant(vectors * ranges)),
            constant(vector * ranges + r)));
  };
  llvm::Align laneAlign(4 * lanes);

  llvm::Value *panels = ceilingDivide(tileColumns_, width);
  llvm::Value *endColumn = builder_.CreateAdd(groupColumn_, tileColumns_);
  emitCountedLoop(builder_, constant(0), panels, 1, [&](llvm::Value *panel) {
    llvm::Value *firstColumn = builder_.CreateAdd(
        groupColumn_, builder_.CreateMul(panel, constant(width)));
    llvm::Value *firstOffset = nullptr; // the panel's first lane's
    llvm::Value *consecutive = builder_.getTrue();
    for (int vector = 0; vector < vectors; ++vector) {
      llvm::Value *columns =
          builder_.CreateAdd(splat(firstColumn), iota(vector * lanes));
      llvm::Value *valid = builder_.CreateICmpSLT(columns, splat(endColumn));
      std::vector<llvm::Value *> digits =
          digitsOf(columns, window.columnExtents, lanesOf);
      llvm::Value *offsets =
          dot(digits, window.columnStrides, lanesOf(0), lanesOf);
      builder_.CreateAlignedStore(offsets, offsetsAt(panel, vector), laneAlign);
      for (size_t r = 0; r < ranges; ++r) {
        llvm::Value *part = dot(digits, bounds[r].column, lanesOf(0), lanesOf);
        // A lane past the tile: far below every range.
        if (r == 0)
          part =
              builder_.CreateSelect(valid, part, lanesOf(-(int64_t(1) << 30)));
        builder_.CreateAlignedStore(part, partAt(panel, vector, r), laneAlign);
      }
      if (!firstOffset)
        firstOffset = builder_.CreateExtractElement(offsets, uint64_t(0));
      llvm::Value *expected = builder_.CreateAdd(
          builder_.CreateVectorSplat(lanes, firstOffset), iota(vector * lanes));
      consecutive = builder_.CreateAnd(
          consecutive, builder_.CreateAndReduce(builder_.CreateOr(
                           builder_.CreateICmpEQ(offsets, expected),
                           builder_.CreateNot(valid))));
    }
    builder_.CreateAlignedStore(
        builder_.CreateZExt(consecutive, builder_.getInt8Ty()),
        builder_.CreateInBoundsGEP(builder_.getInt8Ty(), consecutiveTable,
                                   panel),
        llvm::Align(1));
  });

  llvm::Value *source =
      element(b_, builder_.CreateMul(groupBatch_, constant(spec_.bBatch)));
  llvm::Value *zero = llvm::Constant::getNullValue(vector_);
  llvm::Align align(4);
  emitCountedLoop(builder_, constant(0), depth_, 1, [&](llvm::Value *step) {
    std::vector<llvm::Value *> digits = digitsOf(
        builder_.CreateAdd(depthStart, step), window.depthExtents, scalarOf);
    llvm::Value *rowSource = element(
        source, dot(digits, window.depthStrides, constant(0), scalarOf));
    std::vector<llvm::Value *> rowParts;
    for (const WindowedOperand::Range &range : bounds)
      rowParts.push_back(
          splat(dot(digits, range.depth, constant(range.offset), scalarOf)));
    llvm::Value *packedRow = builder_.CreateInBoundsGEP(
        float_, packedB_, builder_.CreateMul(step, constant(width)));
    emitCountedLoop(builder_, constant(0), panels, 1, [&](llvm::Value *panel) {
      llvm::Value *to = builder_.CreateInBoundsGEP(
          float_, packedRow,
          builder_.CreateMul(builder_.CreateMul(panel, constant(width)),
                             paddedDepth_));
      std::vector<llvm::Value *> masks(vectors);
      for (int vector = 0; vector < vectors; ++vector) {
        llvm::Value *mask = nullptr;
        for (size_t r = 0; r < ranges; ++r) {
          llvm::Value *part = builder_.CreateAlignedLoad(
              laneType, partAt(panel, vector, r), laneAlign);
          llvm::Value *inside = builder_.CreateICmpULT(
              builder_.CreateAdd(part, rowParts[r]), lanesOf(bounds[r].limit));
          mask = mask ? builder_.CreateAnd(mask, inside) : inside;
        }
        masks[vector] = mask;
      }
      llvm::Value *consecutive = builder_.CreateICmpNE(
          builder_.CreateAlignedLoad(
              builder_.getInt8Ty(),
              builder_.CreateInBoundsGEP(builder_.getInt8Ty(), consecutiveTable,
                                         panel),
              llvm::Align(1)),
          builder_.getInt8(0));
      auto loads = [&] {
        llvm::Value *first = builder_.CreateSExt(
            builder_.CreateExtractElement(
                builder_.CreateAlignedLoad(laneType, offsetsAt(panel, 0),
                                           laneAlign),
                uint64_t(0)),
            builder_.getInt64Ty());
        for (int vector = 0; vector < vectors; ++vector)
          builder_.CreateAlignedStore(
              builder_.CreateMaskedLoad(
                  vector_,
                  element(rowSource,
                          builder_.CreateAdd(first, constant(vector * lanes))),
                  align, masks[vector], zero),
              builder_.CreateInBoundsGEP(float_, to, constant(vector * lanes)),
              align);
      };
      auto gathers = [&] {
        for (int vector = 0; vector < vectors; ++vector) {
          llvm::Value *offsets = builder_.CreateAlignedLoad(
              laneType, offsetsAt(panel, vector), laneAlign);
          builder_.CreateAlignedStore(
              builder_.CreateMaskedGather(
                  vector_, builder_.CreateGEP(float_, rowSource, offsets),
                  align, masks[vector], zero),
              builder_.CreateInBoundsGEP(float_, to, constant(vector * lanes)),
              align);
        }
      };
      emitIfElse(consecutive, "window_loads", loads, gathers);
    });
  });
  emitCountedLoop(builder_, constant(0), panels, 1, [&](llvm::Value *panel) {
    emitZeroRows(
        width,
        builder_.CreateInBoundsGEP(
            float_, packedB_,
            builder_.CreateMul(builder_.CreateMul(panel, constant(width)),
                               paddedDepth_)),
        depth_, paddedDepth_);
  });
}

void GemmEmitter::emitTransposePanel(const PanelLayout &layout,
                                     llvm::Value *source, llvm::Value *packed,
                                     llvm::Value *depth) {
  // Squares of at most 8 x 8: with 16 x 16 transposes of AVX-512 registers
  // a Linear-layout GEMM took 120-175 ms to compile on the Xeon, with 8 x 8
  // 60-80 ms, and packed no slower. A loop over the whole squares of the
  // panel, an unrolled copy for its last, partial square.
  const int width = layout.width, lanes = std::min(plan_.lanes, 8);
  const int wholeSquares = width / lanes, rest = width % lanes;
  llvm::Value *wholeDepth = builder_.CreateMul(
      builder_.CreateUDiv(depth, constant(lanes)), constant(lanes));
  emitCountedLoop(
      builder_, constant(0), wholeDepth, lanes, [&](llvm::Value *step) {
        // lanes k steps of `count` panel rows from `first` on: load count
        // source rows (k contiguous), transpose, store lanes packed rows.
        auto square = [&](llvm::Value *first, int count) {
          llvm::Value *from = element(
              source, builder_.CreateAdd(
                          step, builder_.CreateMul(
                                    first, constant(layout.widthStride))));
          std::vector<llvm::Value *> rows(lanes);
          if (lanes == 4) {
            for (int row = 0; row < lanes; ++row)
              rows[row] =
                  row < count
                      ? loadFloats(element(from, row * layout.widthStride),
                                   lanes)
                      : llvm::PoisonValue::get(
                            llvm::FixedVectorType::get(float_, lanes));
          } else {
            // The lane-crossing step as the rows load: row i takes the low
            // halves of source rows i and i + 4, row i + 4 their high halves
            // (vinsertf128 from memory, off Intel's one shuffle port).
            auto *halfType = llvm::FixedVectorType::get(float_, 4);
            auto loadHalf = [&](int row, int part) -> llvm::Value * {
              if (row >= count)
                return llvm::PoisonValue::get(halfType);
              return loadFloats(
                  element(from, row * layout.widthStride + part * 4), 4);
            };
            for (int row = 0; row < 4; ++row)
              for (int part = 0; part < 2; ++part)
                rows[row + part * 4] = builder_.CreateShuffleVector(
                    loadHalf(row, part), loadHalf(row + 4, part),
                    {0, 1, 2, 3, 4, 5, 6, 7});
          }
          std::vector<llvm::Value *> packedRows = transposeInLanes(rows);
          llvm::Value *to = builder_.CreateInBoundsGEP(
              float_, packed,
              builder_.CreateAdd(builder_.CreateMul(step, constant(width)),
                                 first));
          for (int lane = 0; lane < lanes; ++lane)
            builder_.CreateAlignedStore(
                firstLanes(packedRows[lane], count),
                builder_.CreateInBoundsGEP(float_, to, constant(lane * width)),
                llvm::Align(4));
        };
        if (wholeSquares == 1)
          square(constant(0), lanes);
        else if (wholeSquares > 1)
          emitCountedLoop(builder_, constant(0), constant(wholeSquares * lanes),
                          lanes,
                          [&](llvm::Value *first) { square(first, lanes); });
        if (rest > 0)
          square(constant(wholeSquares * lanes), rest);
      });
  // The last depth % lanes steps one element at a time.
  emitCountedLoop(builder_, wholeDepth, depth, 1, [&](llvm::Value *step) {
    llvm::Value *packedRow = builder_.CreateInBoundsGEP(
        float_, packed, builder_.CreateMul(step, constant(width)));
    emitCountedLoop(
        builder_, constant(0), constant(width), 1, [&](llvm::Value *row) {
          llvm::Value *value = builder_.CreateAlignedLoad(
              float_,
              element(source,
                      builder_.CreateAdd(
                          step, builder_.CreateMul(
                                    row, constant(layout.widthStride)))),
              llvm::Align(4));
          builder_.CreateAlignedStore(
              value, builder_.CreateInBoundsGEP(float_, packedRow, row),
              llvm::Align(4));
        });
  });
}

void GemmEmitter::emitScalarPanel(const PanelLayout &layout,
                                  llvm::Value *source, llvm::Value *packed,
                                  llvm::Value *valid, llvm::Value *depth,
                                  llvm::Value *paddedDepth) {
  // Every element of the padded panel: zero beyond the valid rows and k
  // steps, so that the micro-kernel adds nothing there; loads clamp to
  // element 0 of the panel (always valid) instead of branching. Edge panels
  // and unusual strides only: a loop, not unrolled, to keep the IR small.
  llvm::Value *zero = llvm::ConstantFP::get(float_, 0.0);
  emitCountedLoop(
      builder_, constant(0), paddedDepth, 1, [&](llvm::Value *step) {
        llvm::Value *inDepth = builder_.CreateICmpSLT(step, depth);
        llvm::Value *depthOffset =
            builder_.CreateMul(step, constant(layout.depthStride));
        llvm::Value *packedRow = builder_.CreateInBoundsGEP(
            float_, packed, builder_.CreateMul(step, constant(layout.width)));
        emitCountedLoop(
            builder_, constant(0), constant(layout.width), 1,
            [&](llvm::Value *index) {
              llvm::Value *inside = builder_.CreateAnd(
                  inDepth, builder_.CreateICmpSLT(index, valid));
              llvm::Value *offset = builder_.CreateSelect(
                  inside,
                  builder_.CreateAdd(
                      depthOffset,
                      builder_.CreateMul(index, constant(layout.widthStride))),
                  constant(0));
              llvm::Value *value = builder_.CreateAlignedLoad(
                  float_, element(source, offset), llvm::Align(4));
              builder_.CreateAlignedStore(
                  builder_.CreateSelect(inside, value, zero),
                  builder_.CreateInBoundsGEP(float_, packedRow, index),
                  llvm::Align(4));
            });
      });
}

void GemmEmitter::emitZeroRows(int width, llvm::Value *packed,
                               llvm::Value *from, llvm::Value *to) {
  llvm::Value *zero =
      llvm::Constant::getNullValue(llvm::FixedVectorType::get(float_, width));
  emitCountedLoop(builder_, from, to, 1, [&](llvm::Value *step) {
    builder_.CreateAlignedStore(
        zero,
        builder_.CreateInBoundsGEP(float_, packed,
                                   builder_.CreateMul(step, constant(width))),
        llvm::Align(4));
  });
}

std::vector<llvm::Value *> GemmEmitter::emitMicroKernel(const PanelOfA &a,
                                                        llvm::Value *packedB,
                                                        llvm::Value *wholeDepth,
                                                        llvm::Value *depth) {
  std::vector<llvm::Value *> accumulators(
      a.rows.size() * plan_.columnVectors,
      llvm::Constant::getNullValue(vector_));
  if (spec_.k == 0)
    return accumulators;
  emitMicroSteps(accumulators, a, packedB, constant(0), wholeDepth,
                 plan_.depthUnroll);
  if (wholeDepth != depth)
    emitMicroSteps(accumulators, a, packedB, wholeDepth, depth, 1);
  return accumulators;
}

// The micro-tile's rows of C are far apart (a row of C away), and C is
// often out of cache (a new output, or the last k block's write of a tile
// long since left): its lines, read for ownership as the tile is written,
// would stall the write after the k loop; asked for before it, they
// arrive while it runs. On the 16-core Xeon, 1 thread: 2048x768 @
// 768x3072 120 -> 130 GFLOP/s, 1024 x 1024 @ 1024 x 1024 147 -> 153;
// 2 threads 245 -> 263 and 246 -> 256; a tile of one k block the same
// within noise.
void GemmEmitter::prefetchMicroTileOfC(int rows, llvm::Value *row,
                                       llvm::Value *column) {
  if (spec_.cCol != 1)
    return;
  llvm::Function *prefetch = llvm::Intrinsic::getDeclaration(
      &module_, llvm::Intrinsic::prefetch, {builder_.getPtrTy()});
  // The micro-tile's row of C: its first float, the next line's and its
  // last (three lines where the row is not aligned to a line).
  std::vector<int> offsets;
  for (int offset = 0; offset < plan_.columns; offset += 16)
    offsets.push_back(offset);
  offsets.push_back(plan_.columns - 1);
  for (int rowIndex = 0; rowIndex < rows; ++rowIndex) {
    llvm::Value *pointer =
        elementOfC(builder_.CreateAdd(row, constant(rowIndex)), column);
    for (int offset : offsets)
      builder_.CreateCall(prefetch, {element(pointer, offset),
                                     builder_.getInt32(1),   // write
                                     builder_.getInt32(3),   // keep close
                                     builder_.getInt32(1)}); // data
  }
}

llvm::Value *GemmEmitter::elementOfC(llvm::Value *row, llvm::Value *column) {
  llvm::Value *columnOffset =
      spec_.cCol == 1 ? column
                      : builder_.CreateMul(column, constant(spec_.cCol));
  return element(
      tileC_, builder_.CreateAdd(builder_.CreateMul(row, constant(spec_.cRow)),
                                 columnOffset));
}

// k steps [start, end) (a multiple of `unroll` of them, possibly none) of
// the micro-kernel, added to `accumulators`.
void GemmEmitter::emitMicroSteps(std::vector<llvm::Value *> &accumulators,
                                 const PanelOfA &a, llvm::Value *packedB,
                                 llvm::Value *start, llvm::Value *end,
                                 int unroll) {
  const int rows = static_cast<int>(a.rows.size()), columns = plan_.columns,
            columnVectors = plan_.columnVectors, lanes = plan_.lanes;
  llvm::BasicBlock *before = builder_.GetInsertBlock();
  auto *loop = llvm::BasicBlock::Create(context_, "micro_kernel", function_);
  auto *exit =
      llvm::BasicBlock::Create(context_, "micro_kernel_done", function_);
  builder_.CreateCondBr(builder_.CreateICmpSLT(start, end), loop, exit);
  builder_.SetInsertPoint(loop);
  llvm::PHINode *step = builder_.CreatePHI(builder_.getInt64Ty(), 2, "k");
  step->addIncoming(start, before);
  std::vector<llvm::Value *> initial = accumulators;
  std::vector<llvm::PHINode *> phis;
  for (llvm::Value *&accumulator : accumulators) {
    llvm::PHINode *phi = builder_.CreatePHI(vector_, 2, "acc");
    phi->addIncoming(accumulator, before);
    phis.push_back(phi);
    accumulator = phi;
  }
  llvm::Align vectorAlign(std::min(64, 4 * lanes));
  for (int unrolled = 0; unrolled < unroll; ++unrolled) {
    llvm::Value *at = builder_.CreateAdd(step, constant(unrolled));
    llvm::Value *bRow = builder_.CreateInBoundsGEP(
        float_, packedB, builder_.CreateMul(at, constant(columns)));
    llvm::Value *aStep = builder_.CreateMul(at, constant(a.stepStride));
    std::vector<llvm::Value *> bVectors(columnVectors);
    for (int vector = 0; vector < columnVectors; ++vector)
      bVectors[vector] = builder_.CreateAlignedLoad(
          vector_,
          builder_.CreateInBoundsGEP(float_, bRow, constant(vector * lanes)),
          vectorAlign);
    for (int row = 0; row < rows; ++row) {
      llvm::Value *element = builder_.CreateAlignedLoad(
          float_, builder_.CreateInBoundsGEP(float_, a.rows[row], aStep),
          llvm::Align(4));
      llvm::Value *broadcast = builder_.CreateVectorSplat(lanes, element);
      for (int vector = 0; vector < columnVectors; ++vector) {
        llvm::Value *&accumulator = accumulators[row * columnVectors + vector];
        accumulator = multiplyAdd(broadcast, bVectors[vector], accumulator);
      }
    }
  }
  llvm::Value *next = builder_.CreateAdd(step, constant(unroll));
  llvm::BasicBlock *latch = builder_.GetInsertBlock();
  step->addIncoming(next, latch);
  for (size_t index = 0; index < phis.size(); ++index)
    phis[index]->addIncoming(accumulators[index], latch);
  builder_.CreateCondBr(builder_.CreateICmpSLT(next, end), loop, exit);
  builder_.SetInsertPoint(exit);
  for (size_t index = 0; index < phis.size(); ++index) {
    llvm::PHINode *result = builder_.CreatePHI(vector_, 2, "acc_out");
    result->addIncoming(initial[index], before);
    result->addIncoming(accumulators[index], latch);
    accumulators[index] = result;
  }
}

void GemmEmitter::emitWrite(const std::vector<llvm::Value *> &accumulators,
                            int rows, llvm::Value *row, llvm::Value *column,
                            llvm::Value *validColumns, llvm::Value *first,
                            llvm::Value *last) {
  emitByWidth(
      validColumns,
      [&] { emitVectorWrite(accumulators, rows, row, column, first, last); },
      [&] {
        emitScalarWrite(accumulators, rows, row, column, validColumns, first,
                        last);
      });
}

void GemmEmitter::emitIfElse(llvm::Value *condition, const char *name,
                             const std::function<void()> &then,
                             const std::function<void()> &otherwise) {
  std::string label(name);
  auto *yes = llvm::BasicBlock::Create(context_, label + "_then", function_);
  auto *no = llvm::BasicBlock::Create(context_, label + "_else", function_);
  auto *done = llvm::BasicBlock::Create(context_, label + "_done", function_);
  builder_.CreateCondBr(condition, yes, no);
  builder_.SetInsertPoint(yes);
  then();
  builder_.CreateBr(done);
  builder_.SetInsertPoint(no);
  otherwise();
  builder_.CreateBr(done);
  builder_.SetInsertPoint(done);
}

void GemmEmitter::emitByWidth(llvm::Value *validColumns,
                              const std::function<void()> &vectors,
                              const std::function<void()> &elements) {
  if (spec_.cCol != 1) {
    elements();
    return;
  }
  if (spec_.n % plan_.columns == 0) {
    vectors();
    return;
  }
  emitIfElse(builder_.CreateICmpEQ(validColumns, constant(plan_.columns)),
             "full_tile", vectors, elements);
}

// The first k block stores, later ones add to C, the last applies the
// epilogue: selects rather than a copy of the code per case, since one micro-
// tile's write is cheap next to its k loop.
llvm::Value *GemmEmitter::combine(llvm::Value *accumulator,
                                  llvm::Value *pointer, llvm::Value *bias,
                                  llvm::Value *first, llvm::Value *last,
                                  llvm::Value *row, llvm::Value *column) {
  llvm::Value *value = accumulator;
  int lanes = llvm::isa<llvm::FixedVectorType>(accumulator->getType())
                  ? plan_.lanes
                  : 1;
  if (!isTrue(first))
    value = builder_.CreateSelect(
        first, accumulator,
        builder_.CreateFAdd(loadFloats(pointer, lanes), accumulator));
  // A cheap epilogue is computed in every k block and selected in the
  // last; a costly one runs after the stores (emitEpilogueOfStrip).
  if (epilogueAfterStore())
    return value;
  llvm::Value *finished =
      epilogue_ ? epilogue_(builder_, function_->getArg(0), value, groupBatch_,
                            builder_.CreateAdd(groupRow_, row),
                            builder_.CreateAdd(groupColumn_, column), lanes)
                : applyEpilogue(value, bias);
  return isTrue(last) ? finished : builder_.CreateSelect(last, finished, value);
}

void GemmEmitter::emitVectorWrite(
    const std::vector<llvm::Value *> &accumulators, int rows, llvm::Value *row,
    llvm::Value *column, llvm::Value *first, llvm::Value *last) {
  const int lanes = plan_.lanes;
  for (int rowIndex = 0; rowIndex < rows; ++rowIndex) {
    llvm::Value *cRow = builder_.CreateAdd(row, constant(rowIndex));
    llvm::Value *rowPointer = elementOfC(cRow, column);
    for (int vector = 0; vector < plan_.columnVectors; ++vector) {
      llvm::Value *pointer = element(rowPointer, vector * lanes);
      llvm::Value *bias =
          usesBias()
              ? loadBias(cRow,
                         builder_.CreateAdd(column, constant(vector * lanes)),
                         lanes)
              : nullptr;
      builder_.CreateAlignedStore(
          combine(accumulators[rowIndex * plan_.columnVectors + vector],
                  pointer, bias, first, last, cRow,
                  builder_.CreateAdd(column, constant(vector * lanes))),
          pointer, llvm::Align(4));
    }
  }
}

void GemmEmitter::emitScalarWrite(
    const std::vector<llvm::Value *> &accumulators, int rows, llvm::Value *row,
    llvm::Value *column, llvm::Value *validColumns, llvm::Value *first,
    llvm::Value *last) {
  const int lanes = plan_.lanes, columns = plan_.columns;
  // The micro-tile goes through a stack copy, then element by element to
  // the valid part of C.
  for (int rowIndex = 0; rowIndex < rows; ++rowIndex)
    for (int vector = 0; vector < plan_.columnVectors; ++vector)
      builder_.CreateAlignedStore(
          accumulators[rowIndex * plan_.columnVectors + vector],
          builder_.CreateInBoundsGEP(
              float_, scratch_, constant(rowIndex * columns + vector * lanes)),
          llvm::Align(4 * lanes));
  emitCountedLoop(
      builder_, constant(0), constant(rows), 1, [&](llvm::Value *rowIndex) {
        llvm::Value *cRow = builder_.CreateAdd(row, rowIndex);
        emitCountedLoop(
            builder_, constant(0), validColumns, 1,
            [&](llvm::Value *columnIndex) {
              llvm::Value *cColumn = builder_.CreateAdd(column, columnIndex);
              llvm::Value *value = builder_.CreateAlignedLoad(
                  float_,
                  builder_.CreateInBoundsGEP(
                      float_, scratch_,
                      builder_.CreateAdd(
                          builder_.CreateMul(rowIndex, constant(columns)),
                          columnIndex)),
                  llvm::Align(4));
              llvm::Value *pointer = elementOfC(cRow, cColumn);
              llvm::Value *bias =
                  usesBias() ? loadBias(cRow, cColumn, 1) : nullptr;
              llvm::Value *finished =
                  combine(value, pointer, bias, first, last, cRow, cColumn);
              builder_.CreateAlignedStore(finished, pointer, llvm::Align(4));
            });
      });
}

llvm::Value *GemmEmitter::loadBias(llvm::Value *row, llvm::Value *column,
                                   int lanes) {
  llvm::Value *base = element(
      tileBias_,
      builder_.CreateAdd(builder_.CreateMul(row, constant(spec_.biasRow)),
                         builder_.CreateMul(column, constant(spec_.biasCol))));
  if (lanes == 1)
    return loadFloats(base, 1);
  if (spec_.biasCol == 1)
    return loadFloats(base, lanes);
  if (spec_.biasCol == 0)
    return builder_.CreateVectorSplat(lanes, loadFloats(base, 1));
  llvm::Value *gathered = llvm::PoisonValue::get(vector_);
  for (int lane = 0; lane < lanes; ++lane)
    gathered = builder_.CreateInsertElement(
        gathered, loadFloats(element(base, lane * spec_.biasCol), 1),
        uint64_t(lane));
  return gathered;
}

llvm::Value *GemmEmitter::applyEpilogue(llvm::Value *value, llvm::Value *bias) {
  llvm::Type *type = value->getType();
  if (spec_.alpha != 1.0)
    value =
        builder_.CreateFMul(value, llvm::ConstantFP::get(type, spec_.alpha));
  if (!bias)
    return value;
  if (spec_.beta == 1.0)
    return builder_.CreateFAdd(value, bias);
  return multiplyAdd(llvm::ConstantFP::get(type, spec_.beta), bias, value);
}

} // namespace

EmittedGemm emitGemm(llvm::Module &module, const GemmSpec &spec,
                     const HostTarget &host, const std::string &name,
                     const GemmEpilogue &epilogue) {
  if (spec.batch < 0 || spec.m < 0 || spec.n < 0 || spec.k < 0)
    throw Error("emitGemm: negative extent in a " + std::to_string(spec.batch) +
                " x " + std::to_string(spec.m) + " x " +
                std::to_string(spec.n) + " x " + std::to_string(spec.k) +
                " product");
  GemmEmitter emitter(module, spec, host, epilogue);
  return emitter.emit(name);
}

} // namespace kiln::backend
