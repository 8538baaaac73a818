// The CPU schedule pass's decisions as data: vector strategy and lanes for a
// given host, the parallel split, streamed stores, carried values, and that
// CpuProgram compiles what a schedule says.
// Depends on backend/cpu/CpuSchedule.h, backend/cpu/CpuBackend.h, passes/,
// GoogleTest.
#include "backend/cpu/CpuSchedule.h"
#include "backend/Pipeline.h"

#include "backend/cpu/CpuBackend.h"
#include "ir/Error.h"
#include "ir/Graph.h"
#include "ir/Logging.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace kiln;
using backend::CpuSchedule;
using backend::HostTarget;
using backend::KernelSchedule;
using backend::VectorStrategy;

namespace {

Value *op(Graph &graph, std::string_view name,
          const std::vector<Argument> &arguments) {
  return graph.addOp(name, arguments)->result(0);
}

// The stages of the pipeline before the target's schedule.
loop::Program lowerAndFuse(std::shared_ptr<Graph> graph) {
  return backend::planProgram(std::move(graph), backend::Target{});
}

// A host with AVX2-wide vectors, unrolled twice, never streaming.
HostTarget avx2Host() {
  HostTarget host;
  host.vectorBits = 256;
  host.unroll = 2;
  host.streamingBytes = 0;
  return host;
}

// The planned program of x.sum(dims) over float32 `sizes`.
loop::Program sumProgram(Shape sizes, std::vector<int64_t> dims) {
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, sizes));
  graph->setOutputs({op(*graph, "aten::sum.dim_IntList", {x, Argument(dims)})});
  return lowerAndFuse(graph);
}

// The record of the one Kernel step of `program` (a copy: the schedule is
// often a temporary).
KernelSchedule onlyKernel(const loop::Program &program,
                          const CpuSchedule &schedule) {
  const KernelSchedule *found = nullptr;
  for (size_t step = 0; step < program.steps.size(); ++step) {
    if (program.steps[step].kind != loop::Step::Kind::Kernel)
      continue;
    EXPECT_EQ(found, nullptr) << "more than one kernel:\n" << program.str();
    found = &schedule.kernel(step);
  }
  if (!found)
    throw std::runtime_error("no kernel");
  return *found;
}

loop::Program addProgram(DType dtype, std::vector<int64_t> sizes) {
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(dtype, sizes));
  Value *y = graph->addInput(TensorMeta(dtype, sizes));
  graph->setOutputs({op(*graph, "aten::add.Tensor", {x, y})});
  return lowerAndFuse(graph);
}

} // namespace

TEST(CpuSchedule, FlatPointwiseVectorisesItsOuterVariable) {
  // Pointwise chains are coalesced to one flat outer loop: the outer
  // strategy vectorises it, lanes = vector bits / 32-bit floats.
  loop::Program program = addProgram(DType::Float32, {64, 32});
  KernelSchedule kernel =
      onlyKernel(program, backend::scheduleForCpu(program, avx2Host()));
  EXPECT_EQ(kernel.strategy, VectorStrategy::Outer);
  EXPECT_EQ(kernel.lanes, 8);
  EXPECT_EQ(kernel.unroll, 2);
  EXPECT_EQ(kernel.vectorWidths(), std::vector<int>({16, 8}));
  EXPECT_EQ(kernel.parallelDepth, 1u);
  EXPECT_EQ(kernel.streamedStore, nullptr);
  EXPECT_TRUE(kernel.carried.empty());

  // The process's own host: its width over 4-byte elements, its unroll.
  const HostTarget &host = backend::hostTarget();
  KernelSchedule native =
      onlyKernel(program, backend::scheduleForCpu(program, host));
  EXPECT_EQ(native.strategy, VectorStrategy::Outer);
  EXPECT_EQ(native.lanes, host.vectorBits / 32);
  EXPECT_EQ(native.unroll, host.unroll);
}

TEST(CpuSchedule, LanesFollowTheHostWidthAndTheWidestComputeType) {
  auto lanesOf = [](DType dtype, int vectorBits) {
    loop::Program program = addProgram(dtype, {256});
    HostTarget host = avx2Host();
    host.vectorBits = vectorBits;
    return onlyKernel(program, backend::scheduleForCpu(program, host)).lanes;
  };
  EXPECT_EQ(lanesOf(DType::Float32, 256), 8);
  EXPECT_EQ(lanesOf(DType::Float64, 256), 4);
  EXPECT_EQ(lanesOf(DType::Int64, 256), 4);
  EXPECT_EQ(lanesOf(DType::Int8, 256), 8); // computed in at least 32 bits
  EXPECT_EQ(lanesOf(DType::Float32, 128), 4);
  EXPECT_EQ(lanesOf(DType::Float32, 512), 16);
  EXPECT_EQ(lanesOf(DType::Float64, 128), 2);
}

TEST(CpuSchedule, IdsInAnIndexDoNotNarrowTheLanes) {
  // embedding(table, ids) * 2: the int64 ids are address arithmetic (a
  // row number per point), so the float kernel keeps float32's lanes.
  auto graph = std::make_shared<Graph>();
  Value *table = graph->addInput(TensorMeta(DType::Float32, {100, 64}));
  Value *ids = graph->addInput(TensorMeta(DType::Int64, {32}));
  Value *rows = op(*graph, "aten::embedding",
                   {table, ids, Argument(int64_t(-1)), false, false});
  graph->setOutputs({op(*graph, "aten::mul.Scalar", {rows, Argument(2.0)})});
  loop::Program program = lowerAndFuse(graph);
  ASSERT_EQ(program.indexChecks.size(), 1u) << program.str();
  KernelSchedule kernel =
      onlyKernel(program, backend::scheduleForCpu(program, avx2Host()));
  EXPECT_EQ(kernel.lanes, 8) << program.str();
}

TEST(CpuSchedule, OutputsFromTheStreamingSizeOnStreamTheirStore) {
  loop::Program program = addProgram(DType::Float32, {64, 32}); // 8 KiB out
  auto streamedAt = [&](int64_t bytes) {
    HostTarget host = avx2Host();
    host.streamingBytes = bytes;
    return onlyKernel(program, backend::scheduleForCpu(program, host));
  };
  KernelSchedule streamed = streamedAt(8192);
  const loop::Kernel &kernel = program.steps[0].kernel;
  ASSERT_EQ(streamed.streamedStore, &kernel.loops[0].stores[0]);
  EXPECT_EQ(streamed.streamedStore->buffer, program.outputs[0].buffer);
  EXPECT_EQ(streamed.streamedLoop, 0u);
  EXPECT_EQ(streamed.streamAlignment, 8 * 4); // one vector's bytes
  EXPECT_EQ(streamedAt(8193).streamedStore, nullptr);
  EXPECT_EQ(streamedAt(0).streamedStore, nullptr);
}

TEST(CpuSchedule, RowReductionVectorisesItsInnerLoop) {
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {64, 1000}));
  graph->setOutputs({op(*graph, "aten::sum.dim_IntList",
                        {x, Argument(std::vector<int64_t>{1})})});
  loop::Program program = lowerAndFuse(graph);
  HostTarget host = avx2Host();
  host.streamingBytes = 1; // a reduction's loop never streams
  KernelSchedule kernel =
      onlyKernel(program, backend::scheduleForCpu(program, host));
  EXPECT_EQ(kernel.strategy, VectorStrategy::Inner) << program.str();
  EXPECT_EQ(kernel.lanes, 8);
  EXPECT_EQ(kernel.unroll, 2);
  // The reduction's loop over a row; the store of the sum has no range.
  EXPECT_EQ(kernel.innerVectorLoop, std::vector<bool>({true, false}));
  EXPECT_EQ(kernel.parallelDepth, 1u);
  EXPECT_EQ(kernel.streamedStore, nullptr);
}

TEST(CpuSchedule, ColumnReductionVectorisesTheOuterVariable) {
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {64, 1000}));
  graph->setOutputs({op(*graph, "aten::sum.dim_IntList",
                        {x, Argument(std::vector<int64_t>{0})})});
  loop::Program program = lowerAndFuse(graph);
  KernelSchedule kernel =
      onlyKernel(program, backend::scheduleForCpu(program, avx2Host()));
  EXPECT_EQ(kernel.strategy, VectorStrategy::Outer) << program.str();
  EXPECT_EQ(kernel.lanes, 8);
}

// A 2x2 stride-2 max pool over NCHW reads each output column's window as
// two taps 1 apart and the output columns 2 apart: vectors along the taps
// would cover none of their 2 points (all scalar), so the pool vectorises
// its output columns, whose stride-2 loads are spans shuffled, not
// gathers.
TEST(CpuSchedule, StridedPoolsVectoriseTheirOutputColumnsNotTheirTaps) {
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 4, 32, 32}));
  graph->setOutputs(
      {op(*graph, "aten::max_pool2d",
          {x, Shape{2, 2}, Shape{2, 2}, Shape{0, 0}, Shape{1, 1}, false})});
  loop::Program program = lowerAndFuse(graph);
  KernelSchedule kernel =
      onlyKernel(program, backend::scheduleForCpu(program, avx2Host()));
  EXPECT_EQ(kernel.strategy, VectorStrategy::Outer) << program.str();
  EXPECT_EQ(kernel.lanes, 8);
}

TEST(CpuSchedule, SoftmaxCarriesItsExpAndStreamsItsOutput) {
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 8, 100}));
  graph->setOutputs({op(*graph, "aten::_softmax", {x, Argument(-1), false})});
  loop::Program program = lowerAndFuse(graph);
  HostTarget host = avx2Host();
  host.streamingBytes = 1024;
  KernelSchedule kernel =
      onlyKernel(program, backend::scheduleForCpu(program, host));
  ASSERT_EQ(program.steps[0].kernel.loops.size(), 3u) << program.str();
  EXPECT_EQ(kernel.strategy, VectorStrategy::Inner);
  // exp(x - max) of the sum's loop, read again by the normalising loop.
  ASSERT_EQ(kernel.carried.size(), 1u);
  EXPECT_EQ(kernel.carried[0].producer, 1u);
  EXPECT_EQ(kernel.carried[0].consumers, std::vector<size_t>({2}));
  EXPECT_EQ(kernel.carried[0].expr->kind(), loop::ExprKind::Unary);
  EXPECT_EQ(kernel.carried[0].expr->unaryOp(), loop::UnaryOp::Exp);
  // Only the loop that stores (and reduces nothing) streams.
  EXPECT_EQ(kernel.streamedLoop, 2u);
  EXPECT_EQ(kernel.streamedStore, &program.steps[0].kernel.loops[2].stores[0]);
}

// A loop prefetches a page ahead of its contiguous loads where it does more
// than one operation per element it loads (planPrefetch): each of
// softmax's loops (a max, exp's sum, the quotient), a row amax, a sum of
// squares, exp(tanh(x)); not a row sum (one addition an element) or exp(x)
// (one operation), and nothing on a host that does not prefetch.
TEST(CpuSchedule, LoopsThatComputeBetweenTheirLoadsPrefetchAPageAhead) {
  auto schedule = [](const std::function<Value *(Graph &, Value *)> &build,
                     int64_t prefetchBytes) {
    auto graph = std::make_shared<Graph>();
    Value *x = graph->addInput(TensorMeta(DType::Float32, {64, 256}));
    graph->setOutputs({build(*graph, x)});
    loop::Program program = lowerAndFuse(graph);
    HostTarget host = avx2Host();
    host.prefetchBytes = prefetchBytes;
    return onlyKernel(program, backend::scheduleForCpu(program, host));
  };
  auto softmax = [](Graph &g, Value *x) {
    return op(g, "aten::_softmax", {x, Argument(-1), false});
  };
  KernelSchedule kernel = schedule(softmax, 4096);
  EXPECT_EQ(kernel.prefetchBytes, 4096);
  EXPECT_EQ(kernel.prefetchLoop, std::vector<bool>({true, true, true}));
  kernel = schedule(softmax, 0);
  EXPECT_EQ(kernel.prefetchBytes, 0);
  EXPECT_EQ(kernel.prefetchLoop, std::vector<bool>({false, false, false}));

  auto prefetches = [&](const std::function<Value *(Graph &, Value *)> &build) {
    return schedule(build, 4096).prefetchBytes == 4096;
  };
  EXPECT_TRUE(prefetches([](Graph &g, Value *x) {
    return op(g, "aten::amax", {x, std::vector<int64_t>{1}, false});
  }));
  EXPECT_TRUE(prefetches([](Graph &g, Value *x) {
    return op(g, "aten::sum.dim_IntList",
              {op(g, "aten::mul.Tensor", {x, x}), std::vector<int64_t>{1}});
  }));
  EXPECT_TRUE(prefetches([](Graph &g, Value *x) {
    return op(g, "aten::exp", {op(g, "aten::tanh", {x})});
  }));
  EXPECT_FALSE(prefetches([](Graph &g, Value *x) {
    return op(g, "aten::sum.dim_IntList", {x, std::vector<int64_t>{1}});
  }));
  EXPECT_FALSE(
      prefetches([](Graph &g, Value *x) { return op(g, "aten::exp", {x}); }));
}

TEST(CpuSchedule, SizeOneDomainIsScalar) {
  loop::Program program = addProgram(DType::Float32, {1});
  KernelSchedule kernel =
      onlyKernel(program, backend::scheduleForCpu(program, avx2Host()));
  EXPECT_EQ(kernel.strategy, VectorStrategy::Scalar) << program.str();
  EXPECT_EQ(kernel.lanes, 1);
  EXPECT_EQ(kernel.unroll, 1);
  EXPECT_EQ(kernel.parallelDepth, 0u);
}

TEST(CpuSchedule, ParallelSplitFlattensShortLeadingLoops) {
  // out[v0, v1, :] = in[v0, v1, :] over outer ranges `outer`, rows of 100.
  auto parallelDepth = [](std::vector<int64_t> outer) {
    loop::Program program;
    loop::ExprContext &exprs = *program.exprs;
    int64_t points = numelOf(outer) * 100;
    loop::Buffer in, out;
    in.kind = out.kind = loop::BufferKind::Tensor;
    in.meta = out.meta = TensorMeta(DType::Float32, {points});
    int64_t inBuffer = program.addBuffer(in),
            outBuffer = program.addBuffer(out);
    const loop::Expr *flat = exprs.integer(0);
    for (size_t var = 0; var < outer.size(); ++var)
      flat = exprs.add(exprs.mul(flat, exprs.integer(outer[var])),
                       exprs.var(static_cast<int64_t>(var)));
    const loop::Expr *index =
        exprs.add(exprs.mul(flat, exprs.integer(100)),
                  exprs.var(static_cast<int64_t>(outer.size())));
    loop::Loop row;
    row.ranges = {100};
    row.stores.push_back(
        {outBuffer, index, exprs.load(inBuffer, DType::Float32, index)});
    loop::Step step;
    step.kernel.name = "copy";
    step.kernel.outerRanges = outer;
    step.kernel.loops.push_back(row);
    program.steps.push_back(std::move(step));
    KernelSchedule kernel =
        *backend::scheduleForCpu(program, avx2Host()).kernels.at(0);
    EXPECT_EQ(kernel.strategy, VectorStrategy::Inner);
    return kernel.parallelDepth;
  };
  EXPECT_EQ(parallelDepth({2, 8}), 2u);     // 2 chunks are too few
  EXPECT_EQ(parallelDepth({2, 8, 4}), 3u);  // 16 still are
  EXPECT_EQ(parallelDepth({4, 64, 4}), 2u); // 256 are enough
  EXPECT_EQ(parallelDepth({512, 4}), 1u);
}

TEST(CpuSchedule, PrintsOneLinePerKernel) {
  loop::Program program = addProgram(DType::Float32, {64, 32});
  HostTarget host = avx2Host();
  host.streamingBytes = 1024;
  std::string text = backend::scheduleForCpu(program, host).str();
  const loop::Kernel &kernel = program.steps[0].kernel;
  EXPECT_EQ(text, "step 0 " + kernel.name +
                      ": vector=outer lanes=8 unroll=2 parallel=1 stream=" +
                      program.buffers[program.outputs[0].buffer].name +
                      " carried=0\n");
}

TEST(CpuSchedule, CompiledCodeFollowsTheSchedule) {
  loop::Program program = addProgram(DType::Float32, {37, 29});
  std::vector<std::vector<float>> memory(program.buffers.size(),
                                         std::vector<float>(37 * 29));
  for (size_t index = 0; index < memory[0].size(); ++index) {
    memory[0][index] = static_cast<float>(index) * 0.5f;
    memory[1][index] = 3.0f - static_cast<float>(index);
  }
  std::vector<char *> pointers;
  for (auto &buffer : memory)
    pointers.push_back(reinterpret_cast<char *>(buffer.data()));
  int64_t out = program.outputs[0].buffer;
  // Compiles and runs under `schedule`; returns the code (it stays cached
  // while held).
  auto check = [&](const CpuSchedule &schedule) {
    std::fill(memory[out].begin(), memory[out].end(), -1.0f);
    auto compiled = backend::CpuProgram::compile(program, schedule);
    compiled->runKernel(0, pointers.data());
    int64_t wrong = 0;
    for (size_t index = 0; index < memory[out].size(); ++index)
      wrong += memory[out][index] != memory[0][index] + memory[1][index];
    EXPECT_EQ(wrong, 0) << "under\n" << schedule.str();
    return compiled;
  };
  HostTarget narrow = avx2Host();
  narrow.vectorBits = 128;
  narrow.streamingBytes = 64; // streamed, with its alignment prologue
  check(backend::scheduleForCpu(program, narrow));
  CpuSchedule scalar = backend::scheduleForCpu(program, avx2Host());
  scalar.kernels[0]->strategy = VectorStrategy::Scalar;
  scalar.kernels[0]->lanes = scalar.kernels[0]->unroll = 1;
  auto held = check(scalar);
  // The code is the record's: the same record again takes the cached code,
  // another unroll compiles new code (the cache is keyed by the IR, and is
  // bypassed while IR logs are on).
  if (!logEnabled("llvm") && !logEnabled("llvm_opt") && !logEnabled("asm")) {
    backend::KernelCacheStats before = backend::kernelCacheStats();
    check(scalar);
    backend::KernelCacheStats again = backend::kernelCacheStats();
    EXPECT_EQ(again.compiled, before.compiled);
    EXPECT_EQ(again.reused, before.reused + 1);
    CpuSchedule unrolled = backend::scheduleForCpu(program, avx2Host());
    unrolled.kernels[0]->unroll = 3;
    check(unrolled);
    EXPECT_EQ(backend::kernelCacheStats().compiled, again.compiled + 1);
  }
  // A schedule without the program's kernel is an error, not a guess.
  EXPECT_THROW(backend::CpuProgram::compile(program, CpuSchedule()), Error);
}

TEST(CpuSchedule, LongBodiesAreNotUnrolled) {
  // Unrolling gives short bodies independent work; a body of hundreds of
  // instructions has plenty, and unrolling it would only multiply the
  // machine code to make.
  auto chain = [](int length) {
    auto graph = std::make_shared<Graph>();
    Value *x = graph->addInput(TensorMeta(DType::Float32, {64, 32}));
    for (int step = 0; step < length; ++step)
      x = op(*graph, "aten::tanh",
             {op(*graph, "aten::add.Tensor", {x, 1.0 + step})});
    graph->setOutputs({x});
    return lowerAndFuse(graph);
  };
  loop::Program shortChain = chain(2);
  EXPECT_EQ(
      onlyKernel(shortChain, backend::scheduleForCpu(shortChain, avx2Host()))
          .unroll,
      2);
  loop::Program longChain = chain(40);
  KernelSchedule kernel =
      onlyKernel(longChain, backend::scheduleForCpu(longChain, avx2Host()));
  EXPECT_EQ(kernel.strategy, VectorStrategy::Outer);
  EXPECT_EQ(kernel.unroll, 1);
  EXPECT_EQ(kernel.vectorWidths(), std::vector<int>({8}));
}

// A reduction into fewer points than threads (a whole tensor's sum, a few
// rows' norms) splits into partials over chunks, about four a thread, which
// the threads share, and a kernel that combines them; a row reduction of
// as many points as threads, a small one, and a single thread do not.
TEST(CpuSchedule, FewPointsSplitTheirReductionAcrossThreads) {
  auto program = sumProgram;
  auto kernels = [](const loop::Program &p) {
    int count = 0;
    for (const loop::Step &step : p.steps)
      count += step.kind == loop::Step::Kind::Kernel;
    return count;
  };
  loop::Program whole = program({1024, 256}, {0, 1});
  ASSERT_EQ(backend::splitReductionsForCpu(whole, 2), 1);
  ASSERT_EQ(kernels(whole), 2) << whole.str();
  backend::CpuSchedule schedule =
      backend::scheduleForCpu(whole, backend::hostTarget());
  // The partials: 8 chunks of 32K elements, split across the threads.
  const loop::Kernel &partials = whole.steps[0].kernel;
  EXPECT_EQ(numelOf(partials.outerRanges.constants()), 8) << whole.str();
  EXPECT_EQ(schedule.kernel(0).parallelDepth, 1u);
  // Three rows of 64K on 16 threads: 4 chunks a row, the most that keep
  // 16K elements a chunk.
  loop::Program rows = program({3, 65536}, {1});
  ASSERT_EQ(backend::splitReductionsForCpu(rows, 16), 1);
  EXPECT_EQ(numelOf(rows.steps[0].kernel.outerRanges.constants()), 3 * 4)
      << rows.str();
  loop::Program many = program({64, 4096}, {1});
  EXPECT_EQ(backend::splitReductionsForCpu(many, 16), 0);
  loop::Program small = program({100, 100}, {0, 1});
  EXPECT_EQ(backend::splitReductionsForCpu(small, 16), 0);
  loop::Program single = program({1024, 256}, {0, 1});
  EXPECT_EQ(backend::splitReductionsForCpu(single, 1), 0);
}

// A column reduction with fewer points before its columns than threads
// splits its rows into a chunk a thread, and the chunks' kernel runs its
// columns inside each row (rowwise); one with as many leading points as
// threads, and the combining kernel's two-row sums, do not.
TEST(CpuSchedule, ColumnReductionsSplitRowsAndRunRowwise) {
  auto program = sumProgram;
  loop::Program columns = program({8192, 1024}, {0});
  EXPECT_TRUE(backend::columnReduction(columns.steps[0].kernel));
  ASSERT_EQ(backend::splitReductionsForCpu(columns, 2), 1);
  EXPECT_EQ(columns.steps[0].kernel.outerRanges.constants(), Shape({2, 1024}))
      << columns.str();
  CpuSchedule schedule = backend::scheduleForCpu(columns, avx2Host());
  EXPECT_EQ(schedule.kernel(0).strategy, VectorStrategy::Outer);
  EXPECT_EQ(schedule.kernel(0).rowwiseColumns, 1024) << schedule.str();
  EXPECT_EQ(schedule.kernel(1).rowwiseColumns, 0) << schedule.str();
  EXPECT_NE(schedule.str().find("rowwise=1024"), std::string::npos);
  // A row of 20000: the sum's blocks take 4 bytes a column, 8192 columns
  // in 32K at most, so three even tiles of whole 64-column steps.
  loop::Program wide = program({256, 20000}, {0});
  EXPECT_EQ(onlyKernel(wide, backend::scheduleForCpu(wide, avx2Host()))
                .rowwiseColumns,
            6720);
  loop::Program batched = program({16, 500, 64}, {1});
  EXPECT_EQ(backend::splitReductionsForCpu(batched, 4), 0);
  EXPECT_EQ(onlyKernel(batched, backend::scheduleForCpu(batched, avx2Host()))
                .rowwiseColumns,
            64);
  loop::Program rows = program({64, 4096}, {1});
  EXPECT_FALSE(backend::columnReduction(rows.steps[0].kernel));
}
