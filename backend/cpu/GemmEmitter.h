// kiln's own float32 GEMM as LLVM IR for a host CPU (BLIS-style packing and a
// register-blocked micro-kernel), a kernel with the CPU kernels' ABI.
// Depends on backend/cpu/HostTarget.h, LLVM.
#pragma once

#include "backend/cpu/HostTarget.h"

#include <llvm/IR/IRBuilder.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kiln::backend {

/// B as windows of another tensor (an implicit GEMM, e.g. a convolution's
/// im2col, never laid out): k step p and column j are numbered row-major
/// over digits (p: depthExtents, j: columnExtents), and
/// B[b][p][j] = src[b * bBatch + sum_i depthStrides[i] * p_i +
///                  sum_k columnStrides[k] * j_k]
/// (src at B's pointer) where every range holds, else 0. A range holds
/// where 0 <= sum_i depth[i] * p_i + sum_k column[k] * j_k + offset < limit.
struct WindowedOperand {
  std::vector<int64_t> depthExtents, columnExtents;
  std::vector<int64_t> depthStrides, columnStrides;
  struct Range {
    std::vector<int64_t> depth, column;
    int64_t offset = 0;
    int64_t limit = 0;
  };
  std::vector<Range> ranges;
};

/// C[b] = alpha * (A[b] @ B[b]) + beta * bias[b], float32, for b < batch.
/// Strides are in elements; any stride may be 0 (broadcast) or
/// arbitrary (transposed / sliced operands), e.g. a Linear layer's weight
/// W[n][k] used as B has bRow = 1, bCol = k. C's elements must be distinct
/// and must not overlap A, B or bias (C is written before bias is read).
struct GemmSpec {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  /// A[b][i][p] at b * aBatch + i * aRow + p * aCol.
  int64_t aBatch = 0, aRow = 0, aCol = 0;
  /// B[b][p][j] at b * bBatch + p * bRow + j * bCol.
  int64_t bBatch = 0, bRow = 0, bCol = 0;
  /// C[b][i][j] (written).
  int64_t cBatch = 0, cRow = 0, cCol = 1;
  /// bias[b][i][j] (0: broadcast), added where hasBias and beta != 0.
  bool hasBias = false;
  int64_t biasBatch = 0, biasRow = 0, biasCol = 0;
  double alpha = 1.0, beta = 1.0;
  /// Tiles the grid aims at: a few per thread of the pool that runs it
  /// (64 for 16 threads; fewer, larger tiles pack A and B less often).
  /// Tiles first cover fewer row blocks, then narrower column blocks,
  /// then shorter row blocks, never below sizes that amortise packing.
  int64_t targetTiles = 64;
  /// The threads of that pool (0: not known), which take the tiles in
  /// chunks of equal counts or one at a time (equalChunks): more tiles than
  /// the target where the threads' counts of tiles would differ much (three
  /// equal tiles on two threads take as long as four).
  int threads = 0;
  /// Where B's contents are fixed (an exported model's weight), the slot
  /// of the buffers argument that holds B packed ahead, once, by
  /// EmittedGemm::packB: the tiles read it instead of packing B each call.
  /// -1: B is packed by the tiles, on their stacks.
  int packedBSlot = -1;
  /// The epilogue (emitGemm's) is costly: transcendental math or a call,
  /// whose constants and saved registers would spill the micro-kernel's
  /// accumulators if computed from them. A micro-tile's sums are then
  /// stored first and, after the last k block, the epilogue runs over the
  /// tile's elements of C in a loop of its own (in L1 still), once.
  bool costlyEpilogue = false;
  /// B given as windows (bRow and bCol unused then; never packed ahead).
  std::optional<WindowedOperand> windowedB;
};

struct EmittedGemm {
  llvm::Function *function = nullptr;
  /// The function runs tiles [begin, end) of [0, parallelRange); tiles are
  /// independent (disjoint parts of C), so a thread pool may split them.
  /// 0 when C is empty.
  int64_t parallelRange = 1;
  /// Multiply-adds the whole product does (batch * m * n * k, at least
  /// batch * m * n): what a scheduler weighs to decide on threads.
  int64_t work = 0;
  /// Bytes of stack the function's packing buffers take (at most about
  /// 530 KiB): threads that run it need stacks well above that.
  int64_t stackBytes = 0;
  /// Where spec.packedBSlot is set: a function with the same arguments
  /// that packs units [begin, end) of [0, packRange) of B into the
  /// packedBBytes of 64-byte aligned memory at buffers[packedBSlot] (it
  /// reads only B). Units are independent; all must have run before the
  /// GEMM runs on that B.
  llvm::Function *packB = nullptr;
  int64_t packRange = 0;
  int64_t packedBBytes = 0;
};

/// What C's element is, from the finished sum (a float, or a vector of
/// `lanes` floats of consecutive columns) at C[batch][row][column...]
/// (int64 values, the first column for a vector): code emitted with
/// `builder` at its insertion point, which it may move (new blocks);
/// `buffers` is the GEMM function's argument, whose slots from 3 on the
/// epilogue may read. In place of alpha, beta and the bias. Unless
/// spec.costlyEpilogue, it runs on the partial sums of every k block too
/// (the last block's result is stored), so it must then be cheap. It must
/// not read C.
using GemmEpilogue = std::function<llvm::Value *(
    llvm::IRBuilder<> &builder, llvm::Value *buffers, llvm::Value *sum,
    llvm::Value *batch, llvm::Value *row, llvm::Value *column, int lanes)>;

/// Emits `void name(char *const *buffers, int64_t begin, int64_t end)` into
/// `module`: buffers[0] = A, [1] = B, [2] = C, [3] = bias when spec.hasBias
/// (data pointers), B packed ahead at spec.packedBSlot where that is set
/// (and `name_pack_b` to pack it). Code for `host` (its vectorBits
/// 128/256/512, cpuName, features), set as the function's
/// "target-cpu"/"target-features".
/// The IR is vectorised and unrolled explicitly: it expects the CPU
/// backend's pipeline (optimiseCpuModule), not LLVM's vectorisers.
EmittedGemm emitGemm(llvm::Module &module, const GemmSpec &spec,
                     const HostTarget &host, const std::string &name,
                     const GemmEpilogue &epilogue = {});

} // namespace kiln::backend
