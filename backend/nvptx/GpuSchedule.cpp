// The GPU schedule pass: a mapping per kernel from its points and serial
// work, and for reductions from the layout its loads walk.
// Depends on backend/nvptx/GpuSchedule.h, ir/Error.h.
#include "backend/nvptx/GpuSchedule.h"

#include "ir/Error.h"
#include "passes/Scheduler.h"

#include <algorithm>
#include <optional>
#include <sstream>

namespace kiln::backend {

namespace {
constexpr unsigned kWarp = 32;
constexpr unsigned kMaxBlock = 1024;
constexpr unsigned kThreadBlock = 256;
constexpr int64_t kMaxGrid = (int64_t(1) << 31) - 1;
// Static shared memory one block may have.
constexpr int64_t kMaxSharedBytes = 48 * 1024;
// An H100's multiprocessors (an A100 has 108): a grid of fewer blocks
// leaves some idle.
constexpr int64_t kMultiprocessors = 132;
// A thread per point where a reduction kernel has threads to fill the GPU
// and little serial work per thread.
constexpr int64_t kMinReductionThreads = 16384;
constexpr int64_t kMaxReductionWork = 256;
// A warp per point where a point's loops are long enough to share out and
// there are enough points to fill the GPU with warps (measured on an H100).
constexpr int64_t kMinWarpPoints = 2048;
constexpr int64_t kRowLaneWork = 16;
// Lanes get at least this many of a point's elements (a lane's loads then
// outweigh its share of the combine), and at most kMaxLaneWork, or
// kMaxFewBlocksLaneWork where the grid has blocks for a quarter of the
// multiprocessors or fewer: beyond, the blocks read so much each while most
// of the GPU idles that torch's split reductions are several times faster.
// splitReductionsForGpu splits such kernels into partials of several
// blocks, combined by a second launch, where it can.
constexpr int64_t kMinLaneWork = 8;
constexpr int64_t kMaxLaneWork = 2048;
constexpr int64_t kMaxFewBlocksLaneWork = 512;
// Threads a column mapping aims for: H100 holds 270K resident, and a
// column sum streams from memory only with many loads in flight.
constexpr int64_t kColumnThreads = int64_t(1) << 17;
// A column mapping's blocks read whole lines where they still number this
// many: on an H100, sums over 16384 rows of 1024 / 2048 / 4096 columns took
// 27 / 49 / 91 us in blocks of 1024 threads 16 / 32 / 32 columns wide (64,
// 64, 128 blocks), 29 / 55 / 104 us 8 / 8 / 16 wide (128, 256, 256 blocks).
constexpr int64_t kMinColumnBlocks = 64; // about half the multiprocessors
// Pointwise kernels give a thread kPointsPerThread points where there are
// enough points to still have kColumnThreads threads: each thread then has
// several loads in flight, and the GPU schedules a quarter of the blocks.
constexpr unsigned kPointsPerThread = 4;
// Row reductions split across blocks (splitReductionsForGpu) where their
// mapping has fewer blocks than multiprocessors and a point reads at least
// this many elements; a column's chunk keeps at least kMinColumnChunk rows.
constexpr int64_t kMinSplitWork = int64_t(1) << 17;
constexpr int64_t kMinColumnChunk = 256;

unsigned floorPowerOfTwo(int64_t value) {
  unsigned result = 1;
  while (int64_t(result) * 2 <= value && result < (1u << 30))
    result *= 2;
  return result;
}

bool isArg(loop::ReduceOp op) {
  return op == loop::ReduceOp::ArgMax || op == loop::ReduceOp::ArgMin;
}

// The last variable among `first`..`first + ranges.size() - 1` whose range
// is more than 1 (a variable of range 1 walks nothing), or -1.
int64_t lastWalkingVar(int64_t first, const loop::Ranges &ranges) {
  for (size_t d = ranges.size(); d-- > 0;)
    if (ranges[d]->constant().value_or(2) > 1)
      return first + static_cast<int64_t>(d);
  return -1;
}

// Throws kiln::Unsupported where each lane of `record` has too much work.
void refuseLongLanes(const GpuKernelSchedule &record, int64_t work,
                     const std::string &mapping) {
  int64_t laneWork = (work + record.lanesPerPoint - 1) / record.lanesPerPoint;
  if (laneWork <= kMaxLaneWork && (record.grid * 4 >= kMultiprocessors ||
                                   laneWork <= kMaxFewBlocksLaneWork))
    return;
  throw Unsupported("kernel " + record.name + " reduces " +
                    std::to_string(work) + " elements at each of " +
                    std::to_string(record.points) + " points: " + mapping +
                    " (" + std::to_string(record.grid) +
                    " blocks) is too little of the GPU, and the reduction "
                    "could not be split across blocks; torch runs the graph");
}

// The shared memory a mapping's partial results take: two areas of the
// loop that needs the most.
int64_t partialBytes(const loop::Kernel &kernel,
                     const GpuKernelSchedule &record) {
  int64_t words = 0;
  for (const loop::Loop &loop : kernel.loops)
    words = std::max(words, sharedWordsOfLoop(loop, record));
  return 2 * words * 8;
}

// Lanes and points per block of a mapping, and the grid and shared memory
// they give. Throws kiln::Unsupported where the shared memory is too much.
void shape(GpuKernelSchedule &record, const loop::Kernel &kernel,
           GpuMapping mapping, unsigned lanes, unsigned pointsPerBlock) {
  record.mapping = mapping;
  record.lanesPerPoint = lanes;
  record.pointsPerBlock = pointsPerBlock;
  record.block = lanes * pointsPerBlock;
  int64_t blocks = (record.points + pointsPerBlock - 1) / pointsPerBlock;
  if (blocks > kMaxGrid)
    throw Unsupported("a GPU kernel of " + std::to_string(record.points) +
                      " points is more than one grid holds");
  record.grid = static_cast<unsigned>(blocks);
  int64_t bytes = partialBytes(kernel, record);
  if (bytes > kMaxSharedBytes)
    throw Unsupported("kernel " + record.name + " combines " +
                      std::to_string(bytes) +
                      " bytes of partial results in shared memory, more "
                      "than a block has; torch runs the graph");
  record.sharedBytes = static_cast<unsigned>(bytes);
}

// A column mapping: `width` consecutive points a block (the widest, up to
// 32: a 128-byte line of float32 a row, that still gives kMinColumnBlocks
// blocks; at least 8: a whole 32-byte memory sector), lanes doubled until
// the grid has kColumnThreads or lanes run short of work.
void shapeColumns(GpuKernelSchedule &record, const loop::Kernel &kernel,
                  int64_t work) {
  unsigned width = 32;
  while (width > 8 && (record.points + width - 1) / width < kMinColumnBlocks)
    width /= 2;
  unsigned lanes = kWarp / width; // whole warps: shuffles need every lane
  while (lanes * 2 * width <= kMaxBlock &&
         int64_t(lanes) * 2 * kMinLaneWork <= work &&
         record.points * lanes < kColumnThreads)
    lanes *= 2;
  // Fewer lanes, fewer partials, where shared memory runs short (many
  // reductions in one loop).
  GpuKernelSchedule trial = record;
  trial.mapping = GpuMapping::Column;
  trial.pointsPerBlock = width;
  while (lanes > kWarp / width) {
    trial.lanesPerPoint = lanes;
    if (partialBytes(kernel, trial) <= kMaxSharedBytes)
      break;
    lanes /= 2;
  }
  shape(record, kernel, GpuMapping::Column, lanes, width);
  refuseLongLanes(record, work,
                  "a block per " + std::to_string(width) + " columns");
}

// A warp or a block per point: lanes from the point's work, consecutive
// (coalesced along contiguous rows). Over many points, from its longest
// loop: kRowLaneWork elements a lane (a warp below rows of 2048), so that
// a long row (softmax over
// 4096) takes a block, whose few rows in flight per multiprocessor stay in
// its cache for the row's later loops (a warp per row keeps so many rows
// in flight that the second and third reads of softmax come from memory).
void shapeRows(GpuKernelSchedule &record, const loop::Kernel &kernel,
               int64_t work) {
  int64_t longest = 0;
  for (const loop::Loop &loop : kernel.loops)
    longest = std::max(longest, numelOf(loop.ranges.constants()));
  int64_t share = record.points >= kMinWarpPoints ? longest / kRowLaneWork
                                                  : work / kMinLaneWork;
  unsigned lanes =
      std::clamp<unsigned>(floorPowerOfTwo(share), kWarp, kMaxBlock);
  // Two warps a row cost barriers that one warp's shuffles do not: a
  // layer_norm over 8192 rows of 1024 took 96 us with 64 lanes, 55 with 32.
  if (record.points >= kMinWarpPoints && lanes <= 2 * kWarp)
    lanes = kWarp;
  if (lanes == kWarp)
    shape(record, kernel, GpuMapping::WarpPerPoint, kWarp,
          kThreadBlock / kWarp);
  else
    shape(record, kernel, GpuMapping::BlockPerPoint, lanes,
          std::max(1u, kThreadBlock / lanes));
  refuseLongLanes(record, work, "a block per point");
}

} // namespace

std::string_view gpuMappingName(GpuMapping mapping) {
  switch (mapping) {
  case GpuMapping::ThreadPerPoint:
    return "thread-per-point";
  case GpuMapping::WarpPerPoint:
    return "warp-per-point";
  case GpuMapping::BlockPerPoint:
    return "block-per-point";
  case GpuMapping::Column:
    return "column";
  }
  return "?";
}

unsigned GpuKernelSchedule::lanesPerWarp() const {
  return pointsInnermost() ? std::min(lanesPerPoint, kWarp / pointsPerBlock)
                           : std::min(lanesPerPoint, kWarp);
}

unsigned GpuKernelSchedule::partialsPerPoint() const {
  return lanesPerPoint / lanesPerWarp();
}

int64_t sharedWordsOfLoop(const loop::Loop &loop,
                          const GpuKernelSchedule &schedule) {
  if (schedule.partialsPerPoint() <= 1)
    return 0;
  int64_t slots =
      int64_t(schedule.pointsPerBlock) * schedule.partialsPerPoint();
  int64_t words = 0;
  for (const loop::Reduction &reduction : loop.reductions)
    words += slots * (isArg(reduction.op) ? 2 : 1);
  return words;
}

bool reducesAlongColumns(const loop::Kernel &kernel) {
  int64_t outer = static_cast<int64_t>(kernel.outerRanges.size());
  int64_t lastOuter = lastWalkingVar(0, kernel.outerRanges);
  if (lastOuter < 0)
    return false;
  int64_t column = 0, row = 0;
  for (const loop::Loop &loop : kernel.loops) {
    int64_t lastVar = lastWalkingVar(outer, loop.ranges);
    if (lastVar < 0)
      continue;
    for (const loop::Reduction &reduction : loop.reductions) {
      for (const loop::Expr *load : loop::loadsOf(reduction.value)) {
        std::optional<int64_t> along =
            loop::affineCoefficient(load->index(), lastVar);
        std::optional<int64_t> across =
            loop::affineCoefficient(load->index(), lastOuter);
        auto magnitude = [](int64_t value) {
          return value < 0 ? -value : value;
        };
        // Column-like: neighbouring points lie closer in memory than
        // neighbouring positions of the reduction (a sliced column too).
        if (along && magnitude(*along) == 1)
          ++row;
        else if (across && *across != 0 &&
                 (!along || magnitude(*across) < magnitude(*along)))
          ++column;
      }
    }
  }
  return column > row;
}

namespace {

// One kernel's mapping; throws kiln::Unsupported where none serves.
GpuKernelSchedule scheduleKernel(const loop::Kernel &kernel) {
  bool fixed = kernel.outerRanges.isStatic();
  for (const loop::Loop &loop : kernel.loops)
    fixed = fixed && loop.ranges.isStatic();
  if (!fixed)
    throw Unsupported("the GPU code generator compiles kernels of fixed "
                      "sizes; " +
                      kernel.name + " has sizes that vary between calls");
  GpuKernelSchedule record;
  record.name = kernel.name;
  record.points = numelOf(kernel.outerRanges.constants());
  // A point's serial work: every loop's points.
  int64_t work = 0;
  bool reduces = false;
  for (const loop::Loop &loop : kernel.loops) {
    work += numelOf(loop.ranges.constants());
    reduces = reduces || !loop.reductions.empty();
  }
  if (!reduces && record.points >= kColumnThreads * kPointsPerThread) {
    shape(record, kernel, GpuMapping::ThreadPerPoint, 1,
          kThreadBlock * kPointsPerThread);
    record.block = kThreadBlock;
    record.pointsPerThread = kPointsPerThread;
  } else if (!reduces || record.points == 0 ||
             (record.points >= kMinReductionThreads &&
              work <= kMaxReductionWork)) {
    shape(record, kernel, GpuMapping::ThreadPerPoint, 1, kThreadBlock);
  } else if (reducesAlongColumns(kernel)) {
    shapeColumns(record, kernel, work);
  } else {
    shapeRows(record, kernel, work);
  }
  return record;
}

} // namespace

int64_t splitReductionsForGpu(loop::Program &program) {
  return splitReductions(program, [](const loop::Kernel &kernel) -> int64_t {
    std::optional<ReductionExtent> extent = firstReductionExtent(kernel);
    if (!extent)
      return 1;
    int64_t points = extent->points, work = extent->work;
    // A kernel no mapping serves is split where it can be. Of the others,
    // row reductions whose blocks do not fill the GPU and read 128K
    // elements a point or more (one block reads fewer in about the time of
    // a second launch); column reductions measured no faster split.
    std::optional<GpuKernelSchedule> record;
    try {
      record = scheduleKernel(kernel);
    } catch (const Unsupported &) {
    }
    bool columns = reducesAlongColumns(kernel);
    if (points == 0 || (record && (record->grid >= kMultiprocessors ||
                                   columns || work < kMinSplitWork)))
      return 1;
    // Two blocks a multiprocessor: a block a point where rows reduce (its
    // lanes reading at least kMinLaneWork elements each), blocks of 32
    // neighbouring points where columns do (each lane a chunk of rows).
    int64_t wanted = 2 * kMultiprocessors * (columns ? kWarp : 1);
    int64_t minChunk = columns ? kMinColumnChunk : 512 * kMinLaneWork;
    return reductionChunks(kernel, (wanted + points - 1) / points, minChunk);
  });
}

GpuSchedule scheduleForGpu(const loop::Program &program) {
  GpuSchedule schedule;
  schedule.kernels.resize(program.steps.size());
  for (size_t s = 0; s < program.steps.size(); ++s)
    if (program.steps[s].kind == loop::Step::Kind::Kernel)
      schedule.kernels[s] = scheduleKernel(program.steps[s].kernel);
  return schedule;
}

std::string GpuSchedule::str() const {
  std::ostringstream out;
  for (size_t s = 0; s < kernels.size(); ++s) {
    if (!kernels[s])
      continue;
    const GpuKernelSchedule &record = *kernels[s];
    out << "step " << s << " " << record.name << ": grid=" << record.grid
        << " block=" << record.block << " points=" << record.points
        << " mapping=" << gpuMappingName(record.mapping);
    if (record.pointsPerThread > 1)
      out << " points/thread=" << record.pointsPerThread;
    if (record.mapping == GpuMapping::BlockPerPoint)
      out << " lanes=" << record.lanesPerPoint;
    if (record.mapping == GpuMapping::Column)
      out << " points=" << record.pointsPerBlock
          << " lanes=" << record.lanesPerPoint;
    if (record.sharedBytes > 0)
      out << " shared=" << record.sharedBytes;
    out << "\n";
  }
  return out.str();
}

} // namespace kiln::backend
