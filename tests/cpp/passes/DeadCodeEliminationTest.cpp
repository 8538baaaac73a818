// Dead code elimination keeps exactly what the outputs depend on.
#include "passes/DeadCodeElimination.h"
#include "ir/Graph.h"

#include <gtest/gtest.h>

using namespace kiln;

TEST(DeadCodeElimination, RemovesUnreadNodesAndKeepsOutputs) {
  Graph graph;
  Value *x = graph.addInput(TensorMeta(DType::Float32, {4}), "x");
  Value *used = graph.addOp("aten::add.Tensor", {x, x})->result();
  Value *unused = graph.addOp("aten::add.Scalar", {x, 1.5})->result();
  graph.addOp("aten::add.Tensor", {unused, x}); // reads only a dead value
  graph.setOutputs({used});
  EXPECT_EQ(passes::eliminateDeadCode(graph), 2);
  EXPECT_EQ(graph.nodes().size(), 2u); // the input and the live add
  graph.verify();
  EXPECT_EQ(passes::eliminateDeadCode(graph), 0);
}

TEST(DeadCodeElimination, KeepsInputsEvenWhenUnused) {
  Graph graph;
  Value *x = graph.addInput(TensorMeta(DType::Float32, {4}), "x");
  graph.addInput(TensorMeta(DType::Int64, {2}), "unused");
  graph.setOutputs({x});
  EXPECT_EQ(passes::eliminateDeadCode(graph), 0);
  EXPECT_EQ(graph.inputs().size(), 2u);
}
