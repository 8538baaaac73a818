// Graphs with size symbols (dynamic shapes): symbolic metas and arguments,
// the symbols' bindings and values, and specialisation to a static graph,
// on registered ops and an extern node. No Python.
#include "ir/Error.h"
#include "ir/Graph.h"

#include <gtest/gtest.h>

using namespace kiln;

namespace {

/// A meta of `sizes` (hints) whose dim `dim` is symbol `symbol`,
/// contiguous.
TensorMeta symbolicMeta(Shape sizes, int64_t dim, int64_t symbol) {
  TensorMeta meta(DType::Float32, sizes);
  auto layout = std::make_shared<SymbolicLayout>();
  for (int64_t size : sizes)
    layout->sizes.push_back(size::constant(size));
  layout->sizes[dim] = size::symbol(symbol);
  SymSize running = size::constant(1);
  layout->strides.resize(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    layout->strides[d] = running;
    running = size::mul(running, layout->sizes[d]);
  }
  meta.symbolic = std::move(layout);
  return meta;
}

TEST(SymbolicGraph, MetaPrintsAndSpecialisesItsLayout) {
  TensorMeta meta = symbolicMeta({5, 3}, 0, 0);
  EXPECT_TRUE(meta.isSymbolic());
  EXPECT_EQ(meta.str(), "f32[s0, 3]");
  TensorMeta columns = symbolicMeta({4, 7}, 1, 0);
  EXPECT_EQ(columns.symStride(0)->str(), "s0");
  TensorMeta fixed = columns.specialized({9});
  EXPECT_FALSE(fixed.isSymbolic());
  EXPECT_EQ(fixed.sizes, (Shape{4, 9}));
  EXPECT_EQ(fixed.strides, (Shape{9, 1}));
  // Equal hints but another symbolic layout: not the same meta.
  EXPECT_NE(symbolicMeta({5, 3}, 0, 0), TensorMeta(DType::Float32, {5, 3}));
  EXPECT_EQ(symbolicMeta({5, 3}, 0, 0), symbolicMeta({5, 3}, 0, 0));
}

TEST(SymbolicGraph, ArgumentsKeepHintsAndExpressions) {
  Argument length = Argument::symbolicInt(
      6, size::floorDiv(size::symbol(0), size::constant(2)));
  EXPECT_EQ(length.toInt(), 6);
  EXPECT_TRUE(length.isSymbolic());
  EXPECT_EQ(length.str(), "s0//2");
  EXPECT_EQ(length.specialized({20}).toInt(), 10);
  EXPECT_FALSE(length.specialized({20}).isSymbolic());
  Argument shape = Argument::symbolicIntList(
      {12, 4},
      {size::mul(size::symbol(0), size::constant(3)), size::constant(4)});
  EXPECT_EQ(shape.toIntList(), (std::vector<int64_t>{12, 4}));
  EXPECT_EQ(shape.specialized({5}).toIntList(), (std::vector<int64_t>{15, 4}));
  // A list without a symbol is a plain list.
  EXPECT_FALSE(
      Argument::symbolicIntList({2}, {size::constant(2)}).isSymbolic());
  EXPECT_NE(Argument::symbolicInt(6, size::symbol(0)), Argument(int64_t{6}));
}

TEST(SymbolicGraph, SpecialisationEvaluatesSizesAndInfersMetasAgain) {
  Graph graph;
  Value *x = graph.addInput(symbolicMeta({6, 4}, 0, 0), "x");
  EXPECT_EQ(graph.addSymbol({0, 0, 6}), 0);
  Node *add = graph.addOp("aten::add.Tensor", {x, x});
  add->result()->setSymbolicLayout(x->meta().symbolic);
  // A view to [s0 * 4]: a symbolic size argument.
  Node *view =
      graph.addOp("aten::view",
                  {add->result(),
                   Argument::symbolicIntList(
                       {24}, {size::mul(size::symbol(0), size::constant(4))})});
  auto flat = std::make_shared<SymbolicLayout>();
  flat->sizes = {size::mul(size::symbol(0), size::constant(4))};
  flat->strides = {size::constant(1)};
  view->result()->setSymbolicLayout(flat);
  graph.setOutputs({view->result()});

  std::vector<const TensorMeta *> inputs;
  TensorMeta actual(DType::Float32, {11, 4});
  inputs.push_back(&actual);
  std::vector<int64_t> symbols = symbolValues(graph, inputs);
  ASSERT_EQ(symbols, (std::vector<int64_t>{11}));
  std::shared_ptr<Graph> fixed = specializeGraph(graph, symbols);
  EXPECT_TRUE(fixed->symbols().empty());
  EXPECT_EQ(fixed->inputs()[0]->meta().sizes, (Shape{11, 4}));
  EXPECT_EQ(fixed->outputs()[0].toTensor()->meta().sizes, (Shape{44}));
  EXPECT_NO_THROW(fixed->verify());
  // The original keeps its symbols.
  EXPECT_EQ(graph.outputs()[0].toTensor()->meta().str(), "f32[s0*4]");
}

TEST(SymbolicGraph, SymbolsBindToInputDimensions) {
  Graph graph;
  graph.addInput(TensorMeta(DType::Float32, {3}), "x");
  EXPECT_THROW(graph.addSymbol({1, 0, 3}), Error);
  EXPECT_THROW(graph.addSymbol({0, 1, 3}), Error);
  EXPECT_EQ(graph.addSymbol({0, 0, 3}), 0);
  std::vector<const TensorMeta *> none;
  EXPECT_THROW(symbolValues(graph, none), Error);
}

TEST(SymbolicGraph, SpecialisationChecksWhatTheGraphAssumed) {
  // An extern's result sizes come from its symbolic layout; an op whose
  // meta function disagrees with the layout at the given values is left to
  // torch as an extern with that layout, never a graph of wrong sizes.
  Graph graph;
  Value *x = graph.addInput(symbolicMeta({6, 4}, 0, 0), "x");
  graph.addSymbol({0, 0, 6});
  Node *sum =
      graph.addOp("aten::sum.dim_IntList", {x, std::vector<int64_t>{1}});
  auto wrong = std::make_shared<SymbolicLayout>();
  wrong->sizes = {size::add(size::symbol(0), size::constant(1))};
  wrong->strides = {size::constant(1)};
  sum->result()->setSymbolicLayout(wrong);
  graph.setOutputs({sum->result()});
  std::shared_ptr<Graph> fixed = specializeGraph(graph, {6});
  const Node &node = *fixed->outputs()[0].toTensor()->producer();
  EXPECT_TRUE(node.isExtern());
  EXPECT_EQ(node.result()->meta().sizes, (Shape{7}));
}

} // namespace
