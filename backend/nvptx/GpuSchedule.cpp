// The GPU schedule pass, version 1: a thread per outer point.
// Depends on backend/nvptx/GpuSchedule.h, ir/Error.h.
#include "backend/nvptx/GpuSchedule.h"

#include "ir/Error.h"

#include <sstream>

namespace kiln::backend {

namespace {
constexpr unsigned kBlock = 256;
constexpr int64_t kMaxGrid = (int64_t(1) << 31) - 1;
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
    record.block = kBlock;
    int64_t blocks = (record.points + kBlock - 1) / kBlock;
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
          << " points=" << kernels[s]->points << " mapping=thread-per-point\n";
  return out.str();
}

} // namespace kiln::backend
