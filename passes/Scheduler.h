// The scheduler: the passes between lowering and code generation. Fusion
// merges kernels, loop ordering makes the innermost loop contiguous and
// coalesces dimensions, memory planning places temporaries in one workspace.
// Depends on ir/LoopIR.h.
#pragma once

#include "ir/LoopIR.h"

#include <functional>
#include <optional>
#include <string>

namespace kiln {

/// Vertical and horizontal fusion of adjacent kernels (never across an
/// extern): kernels over the same outer domain are merged into one, a
/// pointwise kernel over a longer domain becomes an inner loop of the
/// reduction before it (epilogue) or after it (prologue), stored values are
/// forwarded to the loads that read them at the same point, and stores no
/// one reads are removed with their buffers' kernels. With
/// `shareReductionPasses` (CPU targets), a kernel's independent reductions
/// over the same points are gathered in one loop, so that they read their
/// input in one pass (GPU schedules size shared memory and barriers by
/// loop; they keep one loop a reduction). Never changes what the program
/// computes.
void fuseKernels(loop::Program &program, bool shareReductionPasses = false);

/// A pointwise kernel that reads an extern's result for the last time, at
/// the point it stores, writes its one result over it (a CNN's batch norm
/// and ReLU on a convolution's result, for the next convolution): the
/// result's buffer becomes a view of the extern's, so that the data stays
/// where the caches have it and no second tensor is allocated. Only
/// results no graph value names, not outputs. CPU programs.
void writeOverDeadExternResults(loop::Program &program);

/// Simplifies floor divisions and modulos in index expressions with the
/// ranges of the kernel's variables, so that views' delinearised indices
/// become affine where they are.
void simplifyIndices(loop::Program &program);

/// Lays out each temporary that only matrix products read (a GEMM takes any
/// strides) so that its one pointwise writer stores in the order it reads
/// its sources: a transposed operand is then written by a copy in order,
/// and the GEMM reads it transposed. Rows a multiple of 4 KiB long get a
/// cache line of padding, so that the GEMM reads them in place.
void chooseOperandLayouts(loop::Program &program);

/// Reorders the outer loops of pointwise kernels so that the innermost has
/// the smallest stride, and coalesces adjacent loops (outer and inner) that
/// every index walks as one, so a contiguous tensor becomes one long loop.
/// `tileTransposes` (CPU targets): a kernel that writes another layout
/// than it reads has its long innermost loop cut in tiles, between which
/// the loop along which the read is contiguous walks (L1 reuse).
void chooseLoopOrder(loop::Program &program, bool tileTransposes = true);

/// A kernel's points and the elements its first loop reduces at each, where
/// that loop reduces and the sizes are fixed (nullopt otherwise): what a
/// target weighs to split the reduction (splitReductions).
struct ReductionExtent {
  int64_t points = 0, work = 0;
};
std::optional<ReductionExtent> firstReductionExtent(const loop::Kernel &kernel);

/// The number of chunks to split `kernel`'s first loop into: the largest at
/// most `limit` that divides its first range into chunks of at least
/// `minChunk` elements of the loop; 1 where there is none, or the kernel
/// cannot be split (no reductions in its first loop, ArgMax/ArgMin among
/// them, a matrix product, sizes that vary).
int64_t reductionChunks(const loop::Kernel &kernel, int64_t limit,
                        int64_t minChunk);

/// Splits step `step`'s kernel (reductionChunks above 1): a new kernel
/// before it reduces each chunk of its first loop at (chunk, point...)
/// points into Temporary partial buffers [chunks, points...], and the
/// kernel's first loop combines them with the same operations; its other
/// loops are unchanged. For GPUs, where one block per point (or per few
/// columns) would leave most of the device idle.
void splitReduction(loop::Program &program, size_t step, int64_t chunks);

/// Splits every kernel step for which `chunksFor` gives 2 or more chunks
/// (splitReduction); returns the number split.
int64_t
splitReductions(loop::Program &program,
                const std::function<int64_t(const loop::Kernel &)> &chunksFor);

/// Gives every Temporary buffer an offset in one workspace, reusing the
/// memory of temporaries whose last reader has run; sets workspaceBytes.
/// (A program whose sizes vary is planned for the example call; each call
/// plans its own with planWorkspace.)
void planMemory(loop::Program &program);

/// The workspace offset of every Temporary buffer of `program` whose
/// buffers take `bytes` (by buffer; -1 for the others), as planMemory
/// places them; `total` gets the workspace's size.
std::vector<int64_t> planWorkspace(const loop::Program &program,
                                   const std::vector<int64_t> &bytes,
                                   int64_t &total);

/// The bytes a buffer's elements span from its data pointer (0 when empty).
int64_t bufferBytes(const loop::Buffer &buffer);
int64_t bufferBytes(const TensorMeta &meta);

/// "kernel_add_1: add+mul+exp (3 values, 2 loops)" lines for
/// KILN_LOGS=schedule.
std::string scheduleSummary(const loop::Program &program);

} // namespace kiln
