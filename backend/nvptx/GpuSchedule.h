// The GPU schedule pass: how each kernel of a program maps onto a CUDA grid,
// as data to print (KILN_LOGS=schedule) and to test. Pointwise kernels and
// many short reductions: a thread per outer point; long reductions over many
// rows: a warp per point; over few rows: a block per point; reductions along
// a strided dimension (column sums): blocks of consecutive points, each
// point's loop split across lanes.
// Depends on ir/LoopIR.h.
#pragma once

#include "ir/LoopIR.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::backend {

enum class GpuMapping : uint8_t {
  ThreadPerPoint, // a thread runs the point's loops
  WarpPerPoint,   // 32 consecutive lanes share each loop of a point
  BlockPerPoint,  // 64..1024 consecutive lanes share each loop of a point
  Column,         // consecutive threads take consecutive points; each point's
                  // lanes lie a column of points apart
};

std::string_view gpuMappingName(GpuMapping mapping);

struct GpuKernelSchedule {
  std::string name;
  GpuMapping mapping = GpuMapping::ThreadPerPoint;
  int64_t points = 0; // outer points
  /// Threads per outer point: lane l of a point takes its loops' positions
  /// l, l + lanesPerPoint, ...; reductions combine across the lanes.
  unsigned lanesPerPoint = 1;
  unsigned pointsPerBlock = 256;
  unsigned block = 256; // threads per block: lanesPerPoint * pointsPerBlock
                        // (ThreadPerPoint: pointsPerBlock / pointsPerThread)
  /// ThreadPerPoint: a thread takes this many points a block apart (thread
  /// t of block b: points b * pointsPerBlock + k * block + t), so that each
  /// has several loads in flight.
  unsigned pointsPerThread = 1;
  unsigned grid = 0; // blocks (0: an empty domain, nothing to launch)
  /// Static shared memory for the lanes' partial results (0: none).
  unsigned sharedBytes = 0;

  /// Whether consecutive threads of a block are consecutive points (Column)
  /// rather than consecutive lanes of one point.
  bool pointsInnermost() const { return mapping == GpuMapping::Column; }
  /// The lanes of one point within one warp, and the thread distance
  /// between them: shuffles combine those.
  unsigned lanesPerWarp() const;
  unsigned laneStride() const { return pointsInnermost() ? pointsPerBlock : 1; }
  /// Partial results of each point that meet in shared memory after the
  /// warp shuffles: one per warp holding lanes of the point (1: none, the
  /// shuffles give the whole result).
  unsigned partialsPerPoint() const;
};

struct GpuSchedule {
  /// By step: a record for each Kernel step, nullopt for the others.
  std::vector<std::optional<GpuKernelSchedule>> kernels;
  /// One line per kernel: "step 0 kernel_add_0: grid=16 block=256
  /// points=4096 mapping=thread-per-point", "... mapping=block-per-point
  /// lanes=1024", "... mapping=column points=8 lanes=128 shared=16384".
  std::string str() const;
};

/// The 8-byte words of shared memory one loop of `schedule`'s kernel needs
/// for its reductions' partials (each reduction: one word per partial, and
/// one more for the position of ArgMax/ArgMin). The kernel's loops
/// alternate between two such areas, so that one barrier per loop suffices.
int64_t sharedWordsOfLoop(const loop::Loop &loop,
                          const GpuKernelSchedule &schedule);

/// Whether `kernel` reduces along a strided dimension while its last outer
/// variable walks memory in shorter steps (a column sum): its loads vote, as
/// the CPU schedule's inner/outer choice does.
bool reducesAlongColumns(const loop::Kernel &kernel);

/// Splits the reductions of kernels with fewer outer points than the GPU
/// has multiprocessors into partials and their combination (two launches),
/// so that a full reduction of millions of elements, or a few long rows,
/// fill the GPU. Runs before memory planning; returns the kernels split.
int64_t splitReductionsForGpu(loop::Program &program);

/// Throws kiln::Unsupported for a kernel with more outer points than one
/// grid dimension holds, and for reductions every mapping runs slowly (long
/// serial work per lane, as a full reduction of millions of elements into
/// one point): torch runs those graphs.
GpuSchedule scheduleForGpu(const loop::Program &program);

} // namespace kiln::backend
