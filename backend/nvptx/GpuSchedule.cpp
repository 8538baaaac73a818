// The GPU schedule pass, version 1: a thread per outer point.
// Depends on backend/nvptx/GpuSchedule.h, ir/Error.h.
#include "backend/nvptx/GpuSchedule.h"

#include "ir/Error.h"

#include <sstream>

namespace kiln::backend {

namespace {
constexpr unsigned kBlock = 256;
constexpr int64_t kMaxGrid = (int64_t(1) << 31) - 1;
// A thread per outer point is fast where a reduction kernel has threads to
// fill the GPU and little serial work per thread; elsewhere (softmax over
// long rows, column sums) torch's kernels are far faster until reductions
// map onto warps and blocks, so the graph runs through torch.
constexpr int64_t kMinReductionThreads = 16384;
constexpr int64_t kMaxReductionWork = 256;
// A warp per point where a point's loops are long enough to share out and
// there are enough points to fill the GPU with warps.
constexpr unsigned kWarp = 32;
constexpr int64_t kMinWarpWork = 64;
constexpr int64_t kMinWarpPoints = 2048;
} // namespace

GpuSchedule scheduleForGpu(const loop::Program &program) {
  GpuSchedule schedule;
  schedule.kernels.resize(program.steps.size());
  for (size_t s = 0; s < program.steps.size(); ++s) {
    const loop::Step &step = program.steps[s];
    if (step.kind != loop::Step::Kind::Kernel)
      continue;
    GpuKernelSchedule record;
    record.name = step.kernel.name;
    record.points = 1;
    for (int64_t range : step.kernel.outerRanges)
      record.points *= range;
    int64_t work = 0;
    bool reduces = false;
    for (const loop::Loop &loop : step.kernel.loops) {
      int64_t points = 1;
      for (int64_t range : loop.ranges)
        points *= range;
      work += points;
      reduces = reduces || !loop.reductions.empty();
    }
    bool warp =
        reduces && work >= kMinWarpWork && record.points >= kMinWarpPoints;
    if (reduces && !warp && record.points > 0 &&
        (record.points < kMinReductionThreads || work > kMaxReductionWork))
      throw Unsupported(
          "kernel " + record.name + " reduces " + std::to_string(work) +
          " elements at each of " + std::to_string(record.points) +
          " points: neither a thread nor a warp per point is fast there "
          "(block and split reductions are not written yet), torch runs "
          "the graph");
    record.lanesPerPoint = warp ? kWarp : 1;
    record.block = kBlock;
    int64_t threads = record.points * record.lanesPerPoint;
    int64_t blocks = (threads + kBlock - 1) / kBlock;
    if (blocks > kMaxGrid)
      throw Unsupported("a GPU kernel of " + std::to_string(record.points) +
                        " points is more than one grid holds");
    record.grid = static_cast<unsigned>(blocks);
    schedule.kernels[s] = record;
  }
  return schedule;
}

std::string GpuSchedule::str() const {
  std::ostringstream out;
  for (size_t s = 0; s < kernels.size(); ++s)
    if (kernels[s])
      out << "step " << s << " " << kernels[s]->name
          << ": grid=" << kernels[s]->grid << " block=" << kernels[s]->block
          << " points=" << kernels[s]->points << " mapping="
          << (kernels[s]->lanesPerPoint > 1 ? "warp-per-point"
                                            : "thread-per-point")
          << "\n";
  return out.str();
}

} // namespace kiln::backend
