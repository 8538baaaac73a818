// GPU code generation without a GPU: programs from real graphs through the
// pipeline's stages, then the GPU schedule, NVPTX kernels and PTX. Math that
// needs libdevice is checked where libdevice is found (the GPU machine).
// Depends on backend/nvptx/, passes/, ir/, GoogleTest.
#include "backend/Pipeline.h"
#include "backend/nvptx/GpuCodegen.h"
#include "backend/nvptx/GpuSchedule.h"
#include "ir/Error.h"
#include "ir/Graph.h"

#include <gtest/gtest.h>

#include <functional>

using namespace kiln;
using namespace kiln::backend;

namespace {

const Device kCuda{DeviceType::CUDA, 0};

Value *op(Graph &graph, std::string_view name,
          const std::vector<Argument> &arguments) {
  return graph.addOp(name, arguments)->result(0);
}

/// The pipeline's stages up to memory planning, for CUDA tensors.
loop::Program planned(const std::shared_ptr<Graph> &graph) {
  backend::Target cuda;
  cuda.kind = backend::Target::Kind::Cuda;
  cuda.device = 0;
  return backend::planProgram(graph, cuda);
}

/// A graph of one input [rows, columns] of `dtype` on the GPU and `body`.
loop::Program program(DType dtype, Shape sizes,
                      const std::function<Value *(Graph &, Value *)> &body,
                      Shape strides = {}) {
  auto graph = std::make_shared<Graph>();
  TensorMeta meta = strides.empty() ? TensorMeta(dtype, sizes, kCuda)
                                    : TensorMeta(dtype, sizes, strides);
  meta.device = kCuda;
  Value *x = graph->addInput(meta);
  graph->setOutputs({body(*graph, x)});
  return planned(graph);
}

size_t count(const std::string &text, const std::string &part) {
  size_t found = 0;
  for (size_t at = text.find(part); at != std::string::npos;
       at = text.find(part, at + 1))
    ++found;
  return found;
}

} // namespace

TEST(NvptxCodegen, PointwiseChainIsOneKernelOverEveryElement) {
  loop::Program p = program(DType::Float32, {64, 257}, [](Graph &g, Value *x) {
    Value *y = op(g, "aten::mul.Scalar", {x, Argument(2.0)});
    return op(g, "aten::relu", {op(g, "aten::add.Scalar", {y, Argument(1.0)})});
  });
  GpuSchedule schedule = scheduleForGpu(p);
  ASSERT_EQ(schedule.kernels.size(), 1u);
  EXPECT_EQ(schedule.kernels[0]->points, 64 * 257);
  EXPECT_EQ(schedule.kernels[0]->block, 256u);
  EXPECT_EQ(schedule.kernels[0]->grid, (64u * 257u + 255u) / 256u);
  EXPECT_NE(schedule.str().find("mapping=thread-per-point"), std::string::npos);

  GpuCode code = generateGpuCode(p, "sm_80");
  EXPECT_NE(code.ptx.find(".target sm_80"), std::string::npos);
  ASSERT_TRUE(code.launches[0].has_value());
  const KernelLaunch &launch = *code.launches[0];
  EXPECT_NE(code.ptx.find(".entry " + launch.entry), std::string::npos);
  EXPECT_EQ(launch.buffers.size(), 2u); // the input and the output
  EXPECT_EQ(launch.grid[0], schedule.kernels[0]->grid);
  EXPECT_NE(code.ptx.find("%ctaid.x"), std::string::npos);
}

TEST(NvptxCodegen, ShortRowReductionsCompileLongOnesRunThroughTorch) {
  auto softmax = [](Graph &g, Value *x) {
    return op(g, "aten::_softmax", {x, Argument(-1), Argument(false)});
  };
  for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16}) {
    loop::Program p = program(dtype, {32768, 8}, softmax);
    GpuSchedule schedule = scheduleForGpu(p);
    int64_t points = 0;
    for (const auto &record : schedule.kernels)
      if (record)
        points = std::max(points, record->points);
    EXPECT_EQ(points, 32768); // a thread per row
    GpuCode code = generateGpuCode(p, "sm_90");
    EXPECT_NE(code.ptx.find(".target sm_90"), std::string::npos);
    EXPECT_GE(count(code.ptx, ".entry"), 1u);
  }
  // Few long rows, and a column sum: slow as a thread per point.
  EXPECT_THROW(scheduleForGpu(program(DType::Float32, {32, 1000}, softmax)),
               Unsupported);
  EXPECT_THROW(
      scheduleForGpu(program(DType::Float32, {8192, 64},
                             [](Graph &g, Value *x) {
                               return op(g, "aten::sum.dim_IntList",
                                         {x, std::vector<int64_t>{0}, false});
                             })),
      Unsupported);
}

TEST(NvptxCodegen, LayoutsAndDtypesWithoutLibdeviceMath) {
  // Ops whose math is plain instructions or kiln's inline float32 math.
  std::vector<std::function<Value *(Graph &, Value *)>> bodies = {
      [](Graph &g, Value *x) {
        return op(g, "aten::sum.dim_IntList",
                  {x, std::vector<int64_t>{1}, false});
      },
      [](Graph &g, Value *x) {
        return op(g, "aten::amax", {x, std::vector<int64_t>{1}, true});
      },
      [](Graph &g, Value *x) {
        return op(g, "aten::argmax", {x, Argument(1), false});
      },
      [](Graph &g, Value *x) {
        return op(g, "aten::abs", {op(g, "aten::neg", {x})});
      },
      [](Graph &g, Value *x) {
        return op(g, "aten::gt.Scalar", {x, Argument(0.5)});
      },
      [](Graph &g, Value *x) {
        return op(g, "aten::sqrt", {op(g, "aten::abs", {x})});
      },
      [](Graph &g, Value *x) { return op(g, "aten::floor", {x}); },
      [](Graph &g, Value *x) {
        return op(g, "aten::clone", {op(g, "aten::t", {x})});
      },
  };
  for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16,
                      DType::Float64, DType::Int32, DType::Int64}) {
    for (size_t b = 0; b < bodies.size(); ++b) {
      if (!isFloatingPoint(dtype) && (b == 5 || b == 6))
        continue; // sqrt and floor of integers are other ops
      for (Shape strides : {Shape{}, Shape{1, 16384}}) {
        // A reduction along a strided dim is a column reduction: refused.
        if (b < 3 && !strides.empty())
          continue;
        loop::Program p = program(dtype, {16384, 16}, bodies[b], strides);
        GpuCode code = generateGpuCode(p, "sm_80");
        EXPECT_NE(code.ptx.find(".entry"), std::string::npos)
            << "body " << b << " dtype " << dtypeName(dtype);
      }
    }
  }
  // Empty and size-1 domains.
  loop::Program empty = program(DType::Float32, {0, 5}, [](Graph &g, Value *x) {
    return op(g, "aten::exp", {x});
  });
  GpuCode code = generateGpuCode(empty, "sm_80");
  for (const auto &launch : code.launches) {
    if (launch) {
      EXPECT_EQ(launch->grid[0], 0u); // nothing to launch
    }
  }
  loop::Program one = program(DType::Float32, {1, 1}, [](Graph &g, Value *x) {
    return op(g, "aten::tanh", {op(g, "aten::neg", {x})});
  });
  EXPECT_NE(generateGpuCode(one, "sm_80").ptx.find(".entry"),
            std::string::npos);
}

TEST(NvptxCodegen, LibdeviceMathIsLinkedOrRefusedClearly) {
  loop::Program p = program(DType::Float32, {8, 8}, [](Graph &g, Value *x) {
    return op(g, "aten::sin",
              {op(g, "aten::log1p", {op(g, "aten::abs", {x})})});
  });
  if (findLibdevice().empty()) {
    try {
      generateGpuCode(p, "sm_80");
      FAIL() << "math without libdevice compiled";
    } catch (const Unsupported &error) {
      EXPECT_NE(std::string(error.what()).find("libdevice"), std::string::npos);
    }
    return;
  }
  GpuCode code = generateGpuCode(p, "sm_80");
  EXPECT_EQ(code.ptx.find("__nv_"), std::string::npos)
      << "libdevice calls left unresolved";
}

TEST(NvptxCodegen, LongRowsGetAWarpEachWithShuffleReductions) {
  for (DType dtype : {DType::Float32, DType::Float16, DType::Float64}) {
    loop::Program p = program(dtype, {4096, 1024}, [](Graph &g, Value *x) {
      Value *soft = op(g, "aten::_softmax", {x, Argument(-1), Argument(false)});
      return op(g, "aten::add.Tensor",
                {soft, op(g, "aten::argmax", {x, Argument(1), true})});
    });
    GpuSchedule schedule = scheduleForGpu(p);
    int warps = 0;
    for (const auto &record : schedule.kernels) {
      if (!record || record->lanesPerPoint == 1)
        continue;
      ++warps;
      EXPECT_EQ(record->lanesPerPoint, 32u);
      EXPECT_EQ(record->grid, record->points * 32 / 256);
    }
    EXPECT_GE(warps, 1) << schedule.str();
    EXPECT_NE(schedule.str().find("mapping=warp-per-point"), std::string::npos);
    GpuCode code = generateGpuCode(p, "sm_90");
    EXPECT_NE(code.ptx.find("shfl.sync.bfly"), std::string::npos);
  }
}
