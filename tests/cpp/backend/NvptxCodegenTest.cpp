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

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>

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

TEST(NvptxCodegen, LargePointwiseKernelsGiveAThreadFourPoints) {
  // 4M points: a block of 256 threads covers 1024 points, each thread four
  // of them a block apart (each predicated, the last block partly full).
  loop::Program p =
      program(DType::Float32, {4096, 1025},
              [](Graph &g, Value *x) { return op(g, "aten::exp", {x}); });
  GpuSchedule schedule = scheduleForGpu(p);
  ASSERT_EQ(schedule.kernels.size(), 1u);
  const GpuKernelSchedule &record = *schedule.kernels[0];
  EXPECT_EQ(record.pointsPerThread, 4u);
  EXPECT_EQ(record.block, 256u);
  EXPECT_EQ(record.pointsPerBlock, 1024u);
  EXPECT_EQ(record.grid, (4096u * 1025u + 1023u) / 1024u);
  EXPECT_NE(schedule.str().find("points/thread=4"), std::string::npos);
  // The points are a multiple of 4: the vector body alone, 4 consecutive
  // points as one access each, launched where the input and the output are
  // aligned; the scalar body, a separate code made on demand, elsewhere.
  GpuCode code = generateGpuCode(p, "sm_90");
  EXPECT_EQ(count(code.ptx, "ld.global.v4.f32"), 1u);
  EXPECT_EQ(count(code.ptx, "st.global.v4.f32"), 1u);
  EXPECT_EQ(count(code.ptx, "ld.global.f32"), 0u);
  const KernelLaunch &launch = *code.launches.at(0);
  ASSERT_EQ(launch.aligned.size(), 2u);
  for (const AlignedAccess &access : launch.aligned) {
    EXPECT_EQ(access.byteOffset, 0);
    EXPECT_EQ(access.alignment, 16u);
  }
  EXPECT_NE(launch.aligned[0].parameter, launch.aligned[1].parameter);
  GpuCode scalar = generateScalarGpuCode(p, code);
  ASSERT_TRUE(scalar.launches.at(0).has_value());
  EXPECT_EQ(scalar.launches[0]->entry, launch.entry + "_unaligned");
  EXPECT_EQ(scalar.launches[0]->grid, launch.grid);
  EXPECT_EQ(scalar.launches[0]->buffers, launch.buffers);
  EXPECT_EQ(count(scalar.ptx, "st.global.f32"), 4u);
  EXPECT_EQ(count(scalar.ptx, "ld.global.f32"), 4u);
  EXPECT_EQ(count(scalar.ptx, ".v4."), 0u);
}

TEST(NvptxCodegen, AlignedPointwiseKernelsLoadAndStoreFourWide) {
  // Rows a multiple of 4 long: a thread takes 4 consecutive points, each
  // access one 128-bit vector where the kernel's buffers are aligned, and
  // the scalar body (4 points a block apart) where a view's offset is not.
  // A bias broadcast along the rows is a vector too; the transposed
  // operand's loads stay scalar.
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {4096, 1024}, kCuda));
  TensorMeta biasMeta(DType::Float32, {1024}, kCuda);
  Value *bias = graph->addInput(biasMeta);
  TensorMeta transposed(DType::Float32, {4096, 1024}, {1, 4096});
  transposed.device = kCuda;
  Value *t = graph->addInput(transposed);
  Value *sum = op(*graph, "aten::add.Tensor",
                  {op(*graph, "aten::add.Tensor", {x, bias}), t});
  graph->setOutputs({op(*graph, "aten::exp", {sum})});
  loop::Program p = planned(graph);
  GpuCode code = generateGpuCode(p, "sm_90");
  EXPECT_EQ(count(code.ptx, "ld.global.v4.f32"), 2u) << code.ptx;
  EXPECT_EQ(count(code.ptx, "st.global.v4.f32"), 1u);
  // The transposed loads of the 4 points stay scalar.
  EXPECT_EQ(count(code.ptx, "ld.global.f32"), 4u);
  EXPECT_EQ(count(code.ptx, "st.global.f32"), 0u);
  // The scalar code: 4 points a block apart, 3 loads each.
  GpuCode scalar = generateScalarGpuCode(p, code);
  EXPECT_EQ(count(scalar.ptx, "ld.global.f32"), 12u);
  EXPECT_EQ(count(scalar.ptx, "st.global.f32"), 4u);

  // bfloat16 in, float32 out: 4 bfloat16 are one 64-bit load.
  loop::Program half =
      program(DType::BFloat16, {2048, 1024}, [](Graph &g, Value *x) {
        return op(g, "aten::mul.Scalar", {x, Argument(2.0)});
      });
  GpuCode halfCode = generateGpuCode(half, "sm_90");
  EXPECT_EQ(count(halfCode.ptx, "ld.global.v4.u16") +
                count(halfCode.ptx, "ld.global.v2.u32") +
                count(halfCode.ptx, "ld.global.u64"),
            1u)
      << halfCode.ptx;
}

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
  // A full reduction of millions of elements into one point: one block
  // would do it all, so the schedule refuses it as it is...
  auto sum = [](Graph &g, Value *x) { return op(g, "aten::sum", {x}); };
  loop::Program whole = program(DType::Float32, {4096, 4096}, sum);
  try {
    scheduleForGpu(whole);
    FAIL() << "a full reduction of 16M elements was scheduled in one block";
  } catch (const Unsupported &error) {
    EXPECT_NE(std::string(error.what()).find("could not be split"),
              std::string::npos)
        << error.what();
  }
  // ...and the GPU's split makes it partials over 256 blocks (a divisor of
  // 16M, at most two blocks a multiprocessor), then their sum in one block.
  EXPECT_EQ(splitReductionsForGpu(whole), 1);
  GpuSchedule schedule = scheduleForGpu(whole);
  ASSERT_EQ(schedule.kernels.size(), 2u);
  EXPECT_EQ(schedule.kernels[0]->points, 256);
  EXPECT_EQ(schedule.kernels[0]->mapping, GpuMapping::BlockPerPoint);
  EXPECT_EQ(schedule.kernels[1]->points, 1);
  GpuCode code = generateGpuCode(whole, "sm_90");
  EXPECT_EQ(count(code.ptx, ".entry"), 2u);
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
  // The sum of a 0-d tensor adds its element to +0.0 (a -0.0's sum is +0.0,
  // as in eager), as the CPU's does (tests/py/backend/test_special_values).
  loop::Program scalarSum = program(DType::Float32, {}, [](Graph &g, Value *x) {
    return op(g, "aten::sum", {x});
  });
  EXPECT_NE(generateGpuCode(scalarSum, "sm_80").ptx.find("0f00000000"),
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

TEST(NvptxCodegen, RowsOfManyPointsGetSixteenElementsALane) {
  // 512- and 1024-element rows: a warp each; 4096-element rows (softmax): a
  // block of 256 lanes each, few rows in flight so that the later loops hit
  // cache.
  for (int64_t row : {512, 1024, 4096})
    for (DType dtype : {DType::Float32, DType::Float16, DType::Float64}) {
      loop::Program p = program(dtype, {4096, row}, [](Graph &g, Value *x) {
        Value *soft =
            op(g, "aten::_softmax", {x, Argument(-1), Argument(false)});
        return op(g, "aten::add.Tensor",
                  {soft, op(g, "aten::argmax", {x, Argument(1), true})});
      });
      GpuSchedule schedule = scheduleForGpu(p);
      unsigned lanes = row == 4096 ? 256u : 32u;
      int shared = 0;
      for (const auto &record : schedule.kernels) {
        if (!record || record->lanesPerPoint == 1)
          continue;
        ++shared;
        EXPECT_EQ(record->lanesPerPoint, lanes);
        EXPECT_EQ(record->grid, record->points * lanes / std::max(256u, lanes));
      }
      EXPECT_GE(shared, 1) << schedule.str();
      EXPECT_NE(schedule.str().find(row < 4096 ? "mapping=warp-per-point"
                                               : "block-per-point lanes=256"),
                std::string::npos)
          << schedule.str();
      GpuCode code = generateGpuCode(p, "sm_90");
      EXPECT_NE(code.ptx.find("shfl.sync.bfly"), std::string::npos);
    }
}

namespace {

Value *sumOver(Graph &g, Value *x, int64_t dim) {
  return op(g, "aten::sum.dim_IntList", {x, std::vector<int64_t>{dim}, false});
}

/// The records of the reducing kernels (those mapped with lanes), after
/// checking what every record must hold: a block within CUDA's limits that
/// covers the points, and shared memory within a block's static limit.
std::vector<GpuKernelSchedule> lanedKernels(const GpuSchedule &schedule) {
  std::vector<GpuKernelSchedule> laned;
  for (const auto &record : schedule.kernels) {
    if (!record)
      continue;
    EXPECT_EQ(record->block * record->pointsPerThread,
              record->lanesPerPoint * record->pointsPerBlock);
    EXPECT_LE(record->block, 1024u);
    EXPECT_EQ(record->block % 32, 0u) << schedule.str();
    EXPECT_GE(int64_t(record->grid) * record->pointsPerBlock, record->points);
    EXPECT_LT(int64_t(record->grid - 1) * record->pointsPerBlock,
              std::max<int64_t>(record->points, 1));
    EXPECT_LE(record->sharedBytes, 48u * 1024u);
    EXPECT_EQ(record->sharedBytes > 0, record->partialsPerPoint() > 1);
    if (record->lanesPerPoint > 1)
      laned.push_back(*record);
  }
  return laned;
}

} // namespace

TEST(NvptxCodegen, FewLongRowsGetABlockEachThroughSharedMemory) {
  auto softmax = [](Graph &g, Value *x) {
    return op(g, "aten::_softmax", {x, Argument(-1), Argument(false)});
  };
  auto layerNorm = [](Graph &g, Value *x) {
    return op(g, "aten::layer_norm", {x, std::vector<int64_t>{4096}});
  };
  struct Case {
    Shape sizes;
    std::function<Value *(Graph &, Value *)> body;
    unsigned lanes;
  };
  std::vector<Case> cases = {
      {{64, 65536}, softmax, 1024},
      {{8, 4096}, layerNorm, 1024},
      {{256, 16384}, [](Graph &g, Value *x) { return sumOver(g, x, 1); }, 1024},
      {{1, 70000},
       [](Graph &g, Value *x) { return op(g, "aten::sum", {x}); },
       1024},
      // 600 elements a row: 64 lanes, 4 rows to a block of 256.
      {{100, 600}, [](Graph &g, Value *x) { return sumOver(g, x, 1); }, 64},
  };
  for (const Case &c : cases) {
    for (DType dtype : {DType::Float32, DType::BFloat16}) {
      loop::Program p = program(dtype, c.sizes, c.body);
      GpuSchedule schedule = scheduleForGpu(p);
      std::vector<GpuKernelSchedule> laned = lanedKernels(schedule);
      ASSERT_GE(laned.size(), 1u) << schedule.str();
      for (const GpuKernelSchedule &record : laned) {
        EXPECT_EQ(record.mapping, GpuMapping::BlockPerPoint) << schedule.str();
        EXPECT_EQ(record.lanesPerPoint, c.lanes) << schedule.str();
        EXPECT_EQ(record.points, c.sizes[0]);
        EXPECT_EQ(record.partialsPerPoint(), c.lanes / 32);
      }
      EXPECT_NE(schedule.str().find("mapping=block-per-point lanes=" +
                                    std::to_string(c.lanes)),
                std::string::npos)
          << schedule.str();
      GpuCode code = generateGpuCode(p, "sm_90");
      EXPECT_NE(code.ptx.find("bar.sync"), std::string::npos);
      EXPECT_NE(code.ptx.find("shfl.sync.bfly"), std::string::npos);
      EXPECT_NE(code.ptx.find(".shared"), std::string::npos);
      // ptxas keeps to the registers a block this size has.
      EXPECT_NE(code.ptx.find(".maxntid " + std::to_string(laned[0].block)),
                std::string::npos);
      for (size_t s = 0; s < code.launches.size(); ++s) {
        if (code.launches[s] && schedule.kernels[s]) {
          EXPECT_EQ(code.launches[s]->block[0], schedule.kernels[s]->block);
        }
      }
    }
  }
}

TEST(NvptxCodegen, ArgMaxOverLongRowsCarriesPositionsThroughSharedMemory) {
  for (DType dtype : {DType::Float32, DType::Float16, DType::Int32}) {
    loop::Program p = program(dtype, {8, 100000}, [](Graph &g, Value *x) {
      return op(g, "aten::argmax", {x, Argument(1), false});
    });
    GpuSchedule schedule = scheduleForGpu(p);
    std::vector<GpuKernelSchedule> laned = lanedKernels(schedule);
    ASSERT_EQ(laned.size(), 1u) << schedule.str();
    EXPECT_EQ(laned[0].mapping, GpuMapping::BlockPerPoint);
    EXPECT_EQ(laned[0].lanesPerPoint, 1024u);
    // A value and a position for each of the 32 warps, twice.
    EXPECT_EQ(laned[0].sharedBytes, 2u * 2u * 32u * 8u);
    GpuCode code = generateGpuCode(p, "sm_80");
    EXPECT_NE(code.ptx.find("bar.sync"), std::string::npos);
    EXPECT_NE(code.ptx.find("shfl.sync.bfly"), std::string::npos);
    EXPECT_NE(code.ptx.find("st.shared"), std::string::npos);
    EXPECT_NE(code.ptx.find("ld.shared"), std::string::npos);
  }
}

TEST(NvptxCodegen, ColumnReductionsSplitColumnsAcrossLanes) {
  std::vector<std::function<Value *(Graph &, Value *)>> bodies = {
      [](Graph &g, Value *x) { return sumOver(g, x, 0); },
      [](Graph &g, Value *x) {
        return op(g, "aten::amax", {x, std::vector<int64_t>{0}, false});
      },
      [](Graph &g, Value *x) {
        return op(g, "aten::argmax", {x, Argument(0), false});
      },
      [](Graph &g, Value *x) {
        return op(g, "aten::mean.dim", {x, std::vector<int64_t>{0}, false});
      },
  };
  for (size_t b = 0; b < bodies.size(); ++b) {
    loop::Program p = program(DType::Float32, {4096, 1024}, bodies[b]);
    GpuSchedule schedule = scheduleForGpu(p);
    std::vector<GpuKernelSchedule> laned = lanedKernels(schedule);
    ASSERT_EQ(laned.size(), 1u) << schedule.str();
    const GpuKernelSchedule &record = laned[0];
    // Never a block per column (35 us against eager's 18 on an H100): 16
    // columns a block (64 blocks: 8 wide, 128 blocks, measured slower), 64
    // lanes down each, blocks of 1024 threads.
    EXPECT_EQ(record.mapping, GpuMapping::Column) << schedule.str();
    EXPECT_EQ(record.pointsPerBlock, 16u);
    EXPECT_EQ(record.lanesPerPoint, 64u);
    EXPECT_EQ(record.grid, 64u);
    EXPECT_EQ(record.block, 1024u);
    EXPECT_EQ(record.lanesPerWarp(), 2u);
    EXPECT_EQ(record.partialsPerPoint(), 32u);
    EXPECT_NE(schedule.str().find("mapping=column points=16 lanes=64"),
              std::string::npos)
        << schedule.str();
    GpuCode code = generateGpuCode(p, "sm_90");
    EXPECT_NE(code.ptx.find("bar.sync"), std::string::npos) << b;
    EXPECT_NE(code.ptx.find(".shared"), std::string::npos) << b;
    EXPECT_NE(code.ptx.find("shfl.sync.bfly"), std::string::npos) << b;
  }
  // Wider grids take 32 columns a block: a 128-byte line of each row.
  loop::Program wide = program(DType::Float32, {16384, 4096}, bodies[0]);
  std::vector<GpuKernelSchedule> laned = lanedKernels(scheduleForGpu(wide));
  ASSERT_EQ(laned.size(), 1u);
  EXPECT_EQ(laned[0].mapping, GpuMapping::Column);
  EXPECT_EQ(laned[0].pointsPerBlock, 32u);
  EXPECT_EQ(laned[0].grid, 128u);
  EXPECT_GE(int64_t(laned[0].grid) * laned[0].block, 65536);
  // Few columns, long or short.
  for (Shape sizes : {Shape{5000, 3}, Shape{17, 33}}) {
    for (size_t b = 0; b < bodies.size(); ++b) {
      loop::Program p = program(DType::Float32, sizes, bodies[b]);
      GpuSchedule schedule = scheduleForGpu(p);
      std::vector<GpuKernelSchedule> laned = lanedKernels(schedule);
      ASSERT_EQ(laned.size(), 1u) << schedule.str();
      EXPECT_EQ(laned[0].mapping, GpuMapping::Column) << schedule.str();
      EXPECT_NE(generateGpuCode(p, "sm_80").ptx.find(".entry"),
                std::string::npos);
    }
  }
  // 7 long columns: one block, 781 rows a lane; torch's split reduction is
  // far faster.
  EXPECT_THROW(scheduleForGpu(program(DType::Float32, {100000, 7}, bodies[0])),
               Unsupported);
  // A sliced input (every other column) is still column-like.
  loop::Program sliced =
      program(DType::Float32, {4096, 512}, bodies[0], Shape{1024, 2});
  laned = lanedKernels(scheduleForGpu(sliced));
  ASSERT_EQ(laned.size(), 1u);
  EXPECT_EQ(laned[0].mapping, GpuMapping::Column);
  // A transposed input reduced over dim 0 walks rows: not a column.
  loop::Program transposed = program(
      DType::Float32, {4096, 64},
      [](Graph &g, Value *x) { return sumOver(g, x, 0); }, Shape{1, 4096});
  for (const GpuKernelSchedule &record :
       lanedKernels(scheduleForGpu(transposed)))
    EXPECT_NE(record.mapping, GpuMapping::Column);
}

// The body of the first loop in PTX: from a label to the first branch back
// to it.
std::string firstLoopBody(const std::string &ptx) {
  std::istringstream lines(ptx);
  std::map<std::string, size_t> labels; // label -> where its line starts
  std::string line;
  size_t offset = 0;
  while (std::getline(lines, line)) {
    size_t start = offset;
    offset += line.size() + 1;
    if (!line.empty() && line.back() == ':') {
      labels[line.substr(0, line.size() - 1)] = start;
      continue;
    }
    size_t branch = line.find("bra");
    if (branch == std::string::npos)
      continue;
    std::string target = line.substr(line.find_last_of(" \t") + 1);
    target.pop_back(); // ';'
    auto label = labels.find(target);
    if (label != labels.end())
      return ptx.substr(label->second, start - label->second);
  }
  return "";
}

TEST(NvptxCodegen, ColumnLanesSumPlainlyRowLanesCompensate) {
  // A column lane's step takes 8 rows and adds them without Kahan's
  // compensation, whose chain of dependent additions kept the loads from
  // streaming (28.9 us against 28.1 for a column sum of 64 MB on an H100);
  // the lanes' partials then combine as a tree, as torch's GPU sums do.
  // The first loop of a float32 sum of `sizes` over `dim`, in PTX.
  auto sumLoop = [](Shape sizes, int64_t dim) {
    loop::Program p = program(DType::Float32, sizes, [dim](Graph &g, Value *x) {
      return sumOver(g, x, dim);
    });
    return firstLoopBody(generateGpuCode(p, "sm_90").ptx);
  };
  std::string column = sumLoop({4096, 1024}, 0);
  EXPECT_EQ(count(column, "ld.global.f32"), 8u) << column;
  EXPECT_EQ(count(column, "add.rn.f32"), 8u) << column;
  EXPECT_EQ(count(column, "sub.rn.f32"), 0u) << column;
  // A row lane that is not kept still compensates: 4 positions a step, a
  // compensated addition (three subtractions) each.
  std::string row = sumLoop({64, 65536}, 1);
  EXPECT_GE(count(row, "sub.rn.f32"), 12u) << row;
}

TEST(NvptxCodegen, ColumnDecisionFollowsTheLoads) {
  loop::Program rows =
      program(DType::Float32, {64, 4096},
              [](Graph &g, Value *x) { return sumOver(g, x, 1); });
  loop::Program columns =
      program(DType::Float32, {4096, 64},
              [](Graph &g, Value *x) { return sumOver(g, x, 0); });
  auto reducing = [](const loop::Program &p) -> const loop::Kernel & {
    for (const loop::Step &step : p.steps)
      if (step.kind == loop::Step::Kind::Kernel && step.kernel.reductionCount())
        return step.kernel;
    throw Error("no reduction kernel");
  };
  EXPECT_FALSE(reducesAlongColumns(reducing(rows)));
  EXPECT_TRUE(reducesAlongColumns(reducing(columns)));
}

TEST(NvptxCodegen, EveryReductionOpCompilesOverFewLongRows) {
  // The ops and shapes tests/py/backend/test_cuda_ops.py expects natively
  // compiled on the GPU, reduced along the last dimension.
  std::vector<std::pair<std::string, std::function<Value *(Graph &, Value *)>>>
      floatBodies = {
          {"softmax",
           [](Graph &g, Value *x) {
             return op(g, "aten::_softmax", {x, Argument(-1), Argument(false)});
           }},
          {"log_softmax",
           [](Graph &g, Value *x) {
             return op(g, "aten::_log_softmax",
                       {x, Argument(-1), Argument(false)});
           }},
          {"var",
           [](Graph &g, Value *x) {
             return op(g, "aten::var.dim",
                       {x, std::vector<int64_t>{-1}, Argument(true)});
           }},
          {"mean",
           [](Graph &g, Value *x) {
             return op(g, "aten::mean.dim",
                       {x, std::vector<int64_t>{-1}, Argument(false)});
           }},
      };
  std::vector<std::pair<std::string, std::function<Value *(Graph &, Value *)>>>
      anyBodies = {
          {"sum", [](Graph &g, Value *x) { return sumOver(g, x, -1); }},
          {"amax",
           [](Graph &g, Value *x) {
             return op(g, "aten::amax", {x, std::vector<int64_t>{-1}, false});
           }},
          {"argmax",
           [](Graph &g, Value *x) {
             return op(g, "aten::argmax", {x, Argument(-1), false});
           }},
      };
  for (Shape sizes : {Shape{8, 100000}, Shape{3, 5000}, Shape{1, 70000}}) {
    int64_t columns = sizes[1];
    floatBodies.emplace_back("layer_norm", [columns](Graph &g, Value *x) {
      return op(g, "aten::layer_norm", {x, std::vector<int64_t>{columns}});
    });
    for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16,
                        DType::Int32, DType::Int64}) {
      auto check = [&](const std::string &name,
                       const std::function<Value *(Graph &, Value *)> &body) {
        loop::Program p = program(dtype, sizes, body);
        GpuSchedule schedule;
        try {
          schedule = scheduleForGpu(p);
          generateGpuCode(p, "sm_90");
        } catch (const Unsupported &error) {
          ADD_FAILURE() << name << " " << dtypeName(dtype) << " " << sizes[0]
                        << "x" << sizes[1] << ": " << error.what();
          return;
        }
        for (const GpuKernelSchedule &record : lanedKernels(schedule))
          EXPECT_EQ(record.mapping, GpuMapping::BlockPerPoint)
              << name << "\n"
              << schedule.str();
      };
      for (const auto &[name, body] : anyBodies)
        check(name, body);
      if (isFloatingPoint(dtype))
        for (const auto &[name, body] : floatBodies)
          check(name, body);
    }
    floatBodies.pop_back();
  }
}

TEST(NvptxCodegen, ManyColumnReductionsOfOneInputFitSharedMemory) {
  // Fused into one kernel of seven loops, whose partials take the two
  // shared areas in turn: one barrier a loop.
  auto graph = std::make_shared<Graph>();
  TensorMeta meta(DType::Float64, {4096, 1024}, kCuda);
  meta.device = kCuda;
  Value *x = graph->addInput(meta);
  std::vector<Argument> outputs;
  for (const char *name : {"aten::argmax", "aten::argmin"})
    for (int copy = 0; copy < 3; ++copy)
      outputs.push_back(
          op(*graph, name,
             {op(*graph, "aten::mul.Scalar", {x, Argument(double(copy + 1))}),
              Argument(0), false}));
  outputs.push_back(sumOver(*graph, x, 0));
  graph->setOutputs(outputs);
  loop::Program p = planned(graph);
  GpuSchedule schedule = scheduleForGpu(p);
  std::vector<GpuKernelSchedule> laned = lanedKernels(schedule);
  ASSERT_GE(laned.size(), 1u) << schedule.str();
  for (const GpuKernelSchedule &record : laned)
    EXPECT_EQ(record.mapping, GpuMapping::Column) << schedule.str();
  ASSERT_EQ(laned.size(), 1u) << schedule.str();
  // argmax's two areas: 2 words of 8 bytes, 32 partials of 16 columns.
  EXPECT_EQ(laned[0].sharedBytes, 2u * 2u * 8u * 32u * 16u);
  EXPECT_EQ(count(generateGpuCode(p, "sm_90").ptx, "bar.sync"), 7u);
}

TEST(NvptxCodegen, RowsStayInRegistersAcrossTheLoopsOfAKernel) {
  // softmax and layer_norm read a row in each of their loops; a warp per row
  // of 1024 keeps 32 positions a lane in registers, so the row is read from
  // memory once: one load of x per kept position, none in a loop.
  auto softmax = [](Graph &g, Value *x) {
    return op(g, "aten::_softmax", {x, Argument(-1), Argument(false)});
  };
  auto layerNorm = [](Graph &g, Value *x) {
    return op(g, "aten::layer_norm", {x, std::vector<int64_t>{1024}});
  };
  std::vector<std::pair<std::function<Value *(Graph &, Value *)>, size_t>>
      bodies = {{softmax, 32}, {layerNorm, 32}};
  for (const auto &[body, loads] : bodies)
    for (DType dtype : {DType::Float32, DType::BFloat16}) {
      loop::Program p = program(dtype, {8192, 1024}, body);
      GpuSchedule schedule = scheduleForGpu(p);
      std::vector<GpuKernelSchedule> laned = lanedKernels(schedule);
      ASSERT_EQ(laned.size(), 1u) << schedule.str();
      ASSERT_EQ(laned[0].mapping, GpuMapping::WarpPerPoint) << schedule.str();
      GpuCode code = generateGpuCode(p, "sm_90");
      std::string load =
          dtype == DType::Float32 ? "ld.global.f32" : "ld.global.u16";
      // The aligned body: 4 consecutive positions a lane, one vector each.
      EXPECT_EQ(count(code.ptx, "ld.global.v4"), loads / 4) << code.ptx;
      EXPECT_EQ(count(code.ptx, "st.global.v4"), 8u) << code.ptx;
      EXPECT_EQ(count(code.ptx, load), 0u) << code.ptx;
      // The scalar body, for misaligned rows, keeps them too.
      GpuCode scalar = generateScalarGpuCode(p, code);
      EXPECT_EQ(count(scalar.ptx, load), loads) << scalar.ptx;
    }
  // Rows too long to keep (64 positions a lane) still loop, 4 positions a
  // step: fewer loads than a lane's 64 positions, for the three loops.
  loop::Program p = program(DType::Float32, {8, 65536}, softmax);
  GpuCode scalar = generateScalarGpuCode(p, generateGpuCode(p, "sm_90"));
  EXPECT_LT(count(scalar.ptx, "ld.global.f32"), 64u);
  EXPECT_GE(count(scalar.ptx, "ld.global.f32"), 3u * 4u);
}

TEST(NvptxCodegen, KernelsEqualButForTheirNameShareOneEntry) {
  // Two layers' softmaxes of one shape, a third of another shape: the
  // first two launch one entry (the driver compiles it once), each with its
  // own buffers.
  auto graph = std::make_shared<Graph>();
  auto input = [&](Shape sizes) {
    TensorMeta meta(DType::Float32, sizes, kCuda);
    meta.device = kCuda;
    return graph->addInput(meta);
  };
  Value *a = input({64, 512}), *w = input({512, 512}), *c = input({32, 256});
  auto softmax = [&](Value *x) {
    return op(*graph, "aten::_softmax", {x, Argument(-1), Argument(false)});
  };
  // The product between them (an extern) keeps them apart.
  Value *first = softmax(a);
  Value *second = softmax(op(*graph, "aten::mm", {first, w}));
  graph->setOutputs({second, softmax(c)});
  loop::Program p = planned(graph);
  GpuCode code = generateGpuCode(p, "sm_90");
  std::vector<KernelLaunch> launches;
  for (const auto &launch : code.launches)
    if (launch)
      launches.push_back(*launch);
  ASSERT_EQ(launches.size(), 3u);
  EXPECT_EQ(launches[0].entry, launches[1].entry);
  EXPECT_NE(launches[0].buffers, launches[1].buffers);
  EXPECT_NE(launches[2].entry, launches[0].entry);
  EXPECT_EQ(count(code.ptx, ".entry"), 2u) << code.ptx;
  // Each entry the launches name is in the PTX.
  for (const KernelLaunch &launch : launches)
    EXPECT_NE(code.ptx.find(".entry " + launch.entry + "("), std::string::npos)
        << launch.entry;
}

TEST(NvptxCodegen, RowLoopsTakeFourGroupsOfFourAStep) {
  // A warp per row of 1024 that loops (one loop: nothing to keep): each
  // step of a lane's loop loads 4 groups of 4 consecutive positions, one
  // 128-bit load each; a lane's 32 positions are two steps (unrolled by
  // LLVM: 8 loads). The scalar body takes 4 single positions a step.
  loop::Program sum =
      program(DType::Float32, {16384, 1024},
              [](Graph &g, Value *x) { return sumOver(g, x, 1); });
  GpuCode code = generateGpuCode(sum, "sm_90");
  EXPECT_EQ(count(code.ptx, "ld.global.v4.f32"), 8u) << code.ptx;
  EXPECT_EQ(count(generateScalarGpuCode(sum, code).ptx, "ld.global.f32"), 4u);
  // Rows too long to keep: softmax's statistics kernel (two loops, 4
  // groups a step each), then its pointwise kernel of 512K points (4
  // consecutive points a thread).
  loop::Program softmax =
      program(DType::Float32, {8, 65536}, [](Graph &g, Value *x) {
        return op(g, "aten::_softmax", {x, Argument(-1), Argument(false)});
      });
  GpuCode softmaxCode = generateGpuCode(softmax, "sm_90");
  EXPECT_EQ(count(softmaxCode.ptx, "ld.global.v4.f32"), 2u * 4u + 1u)
      << softmaxCode.ptx;
  EXPECT_EQ(count(softmaxCode.ptx, "st.global.v4.f32"), 1u);
}

TEST(NvptxCodegen, ColumnSumsNoMappingServesSplitTheirRows) {
  // sum(0) of 1000000x7: lanes would read too much each in the few blocks
  // of 7 columns, so the schedule refuses it; split into chunks of rows,
  // the partials take blocks of neighbouring columns and a second launch
  // adds them.
  auto columnSum = [](Graph &g, Value *x) { return sumOver(g, x, 0); };
  loop::Program p = program(DType::Float32, {1000000, 7}, columnSum);
  EXPECT_THROW(scheduleForGpu(p), Unsupported);
  EXPECT_EQ(splitReductionsForGpu(p), 1);
  GpuSchedule after = scheduleForGpu(p);
  ASSERT_EQ(after.kernels.size(), 2u);
  EXPECT_EQ(after.kernels[0]->mapping, GpuMapping::Column) << after.str();
  EXPECT_GE(after.kernels[0]->points, 7 * 1000) << after.str();
  EXPECT_EQ(after.kernels[1]->points, 7);
  // Column sums the schedule serves stay one launch (split, they measured
  // slower on an H100).
  loop::Program served = program(DType::Float32, {16384, 1024}, columnSum);
  EXPECT_EQ(splitReductionsForGpu(served), 0);
}

TEST(NvptxCodegen, Float32ExpTanhAndErfUseTheSpecialFunctionUnit) {
  // exp's 2^r is one ex2.approx (11 instructions in all, where the portable
  // polynomial, which has none, takes about 30); tanh and erf build on it.
  for (const char *name : {"aten::exp", "aten::tanh", "aten::erf"}) {
    loop::Program p =
        program(DType::Float32, {64, 64},
                [&](Graph &g, Value *x) { return op(g, name, {x}); });
    GpuCode code = generateGpuCode(p, "sm_90");
    EXPECT_GE(count(code.ptx, "ex2.approx.ftz.f32"), 1u) << name << code.ptx;
  }
}

// The elementwise ops added with their own formulas (no libdevice math):
// each a kernel that compiles to PTX for the GPU, half types included.
TEST(NvptxCodegen, NewArithmeticOpsCompileForTheGpu) {
  using Body = std::function<Value *(Graph &, Value *)>;
  const std::vector<std::pair<std::string, Body>> bodies = {
      {"copysign",
       [](Graph &g, Value *x) {
         return op(g, "aten::copysign.Scalar", {x, Argument(-1.0)});
       }},
      {"fmax",
       [](Graph &g, Value *x) {
         return op(g, "aten::fmax",
                   {x, op(g, "aten::mul.Scalar", {x, Argument(0.5)})});
       }},
      {"hypot",
       [](Graph &g, Value *x) {
         return op(g, "aten::hypot",
                   {x, op(g, "aten::add.Scalar", {x, Argument(1.0)})});
       }},
      {"addcmul",
       [](Graph &g, Value *x) { return op(g, "aten::addcmul", {x, x, x}); }},
      {"addcdiv",
       [](Graph &g, Value *x) { return op(g, "aten::addcdiv", {x, x, x}); }},
      {"threshold",
       [](Graph &g, Value *x) {
         return op(g, "aten::threshold", {x, Argument(0.1), Argument(20.0)});
       }},
      {"signbit",
       [](Graph &g, Value *x) { return op(g, "aten::signbit", {x}); }},
      {"isposinf",
       [](Graph &g, Value *x) { return op(g, "aten::isposinf", {x}); }},
  };
  for (DType dtype : {DType::Float32, DType::Float16}) {
    for (const auto &[name, body] : bodies) {
      loop::Program p = program(dtype, {64, 257}, body);
      EXPECT_EQ(p.steps.size(), 1u) << name;
      GpuCode code = generateGpuCode(p, "sm_80");
      ASSERT_TRUE(code.launches.at(0).has_value()) << name;
      EXPECT_NE(code.ptx.find(".entry " + code.launches[0]->entry),
                std::string::npos)
          << name;
    }
  }
}
