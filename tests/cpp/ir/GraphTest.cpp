// The graph IR: the printer's exact text and the verifier's checks, on the
// registered add ops and extern nodes. No Python.
#include "ir/Graph.h"
#include "ir/Error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

using namespace kiln;

namespace {

std::shared_ptr<const OpSchema> schemaOf(const char *text) {
  return std::make_shared<const OpSchema>(parseSchema(text));
}

std::shared_ptr<ConstantData> constantOf(std::vector<float> values) {
  auto data = std::make_shared<ConstantData>();
  data->meta =
      TensorMeta(DType::Float32, {static_cast<int64_t>(values.size())});
  data->bytes.resize(values.size() * sizeof(float));
  std::memcpy(data->bytes.data(), values.data(), data->bytes.size());
  return data;
}

const char *kMaxDim = "aten::max.dim(Tensor self, int dim, bool keepdim=False) "
                      "-> (Tensor values, Tensor indices)";

// The verifier guards invariants that Graph's own methods never break, so a
// test must break them from outside: explicit instantiation may name private
// members ([temp.spec.general]), which hands out pointers to them.
template <typename Tag, typename Tag::type Member> struct PrivateAccess {
  friend typename Tag::type memberOf(Tag) { return Member; }
};
struct GraphNodes {
  using type = std::vector<std::unique_ptr<Node>> Graph::*;
  friend type memberOf(GraphNodes);
};
struct ValueMeta {
  using type = TensorMeta Value::*;
  friend type memberOf(ValueMeta);
};
struct NodeArguments {
  using type = std::vector<Argument> Node::*;
  friend type memberOf(NodeArguments);
};
template struct PrivateAccess<GraphNodes, &Graph::nodes_>;
template struct PrivateAccess<ValueMeta, &Value::meta_>;
template struct PrivateAccess<NodeArguments, &Node::arguments_>;

std::string verifyError(const Graph &graph) {
  try {
    graph.verify();
  } catch (const Error &error) {
    return error.what();
  }
  return "";
}

} // namespace

TEST(Graph, PrintsInputsOpsKeywordsAndOutputs) {
  Graph graph;
  Value *x = graph.addInput(TensorMeta(DType::Float32, {2, 3}), "x");
  Value *y = graph.addInput(TensorMeta(DType::Float32, {2, 3}, {1, 2}), "y");
  // alpha=1 is the default and is left out; alpha=2 is printed by name.
  Node *sum = graph.addOp("aten::add.Tensor", {x, y});
  Node *scaled = graph.addOp("aten::add.Tensor", {sum->result(), x},
                             {{"alpha", Argument(int64_t{2})}});
  Node *shifted = graph.addOp("aten::add.Scalar", {scaled->result(), 0.5});
  graph.setOutputs({shifted->result(), sum->result()});
  graph.verify();
  EXPECT_EQ(graph.str(),
            "graph(%x: f32[2, 3], %y: f32[2, 3]{strides=[1, 2]}):\n"
            "  %0: f32[2, 3] = aten::add.Tensor(%x, %y)\n"
            "  %1: f32[2, 3] = aten::add.Tensor(%0, %x, alpha=2)\n"
            "  %2: f32[2, 3] = aten::add.Scalar(%1, 0.5)\n"
            "  return (%2, %0)\n");
}

TEST(Graph, PrintsExternsWithSeveralResultsConstantsAndNonTensorOutputs) {
  Graph graph;
  Value *x = graph.addInput(TensorMeta(DType::Float32, {4, 2}), "x");
  Value *bias = graph.addConstant(constantOf({1.0f, 2.0f}), "bias");
  Node *sum = graph.addOp("aten::add.Tensor", {x, bias});
  auto schema = schemaOf(kMaxDim);
  Node *max = graph.addExtern(
      schema, schema->normalize({sum->result(), int64_t{1}}, {}),
      {TensorMeta(DType::Float32, {4}), TensorMeta(DType::Int64, {4})});
  auto view = schemaOf("aten::t(Tensor(a) self) -> Tensor(a)");
  Node *transposed =
      graph.addExtern(view, {x}, {TensorMeta(DType::Float32, {2, 4}, {1, 2})});
  graph.setOutputs({max->result(1), Argument(), int64_t{3}, 2.5, true,
                    transposed->result()});
  graph.verify();
  EXPECT_EQ(graph.str(),
            "graph(%x: f32[4, 2]):\n"
            "  %bias: f32[2] = constant()\n"
            "  %0: f32[4, 2] = aten::add.Tensor(%x, %bias)\n"
            "  %1: f32[4], %2: i64[4] = extern aten::max.dim(%0, 1)\n"
            "  %3: f32[2, 4]{strides=[1, 2]} = extern aten::t(%x)\n"
            "  return (%2, None, 3, 2.5, True, %3)\n");
  EXPECT_TRUE(max->isExtern());
  EXPECT_EQ(max->results().size(), 2u);
  EXPECT_EQ(max->result(1)->index(), 1u);
}

TEST(Graph, PrintsDefaultsThatWereOverriddenAndListArguments) {
  Graph graph;
  Value *x = graph.addInput(TensorMeta(DType::Float32, {2, 3}), "x");
  Value *y = graph.addInput(TensorMeta(DType::Float32, {2, 3}), "y");
  auto cat = schemaOf("aten::cat(Tensor[] tensors, int dim=0) -> Tensor");
  Node *joined =
      graph.addExtern(cat,
                      cat->normalize({std::vector<Value *>{x, y}},
                                     {{"dim", Argument(int64_t{1})}}),
                      {TensorMeta(DType::Float32, {2, 6})});
  auto sum = schemaOf("aten::sum.dim_IntList(Tensor self, int[1]? dim, bool "
                      "keepdim=False, *, ScalarType? dtype=None) -> Tensor");
  Node *total = graph.addExtern(
      sum,
      sum->normalize({joined->result(), std::vector<int64_t>{0, 1}},
                     {{"dtype", Argument(DType::Float64)}}),
      {TensorMeta(DType::Float64, {})});
  graph.setOutputs({total->result()});
  EXPECT_EQ(
      graph.str(),
      "graph(%x: f32[2, 3], %y: f32[2, 3]):\n"
      "  %0: f32[2, 6] = extern aten::cat([%x, %y], dim=1)\n"
      "  %1: f64[] = extern aten::sum.dim_IntList(%0, [0, 1], dtype=f64)\n"
      "  return (%1)\n");
  graph.verify();
}

TEST(Graph, NamesStayUnique) {
  Graph graph;
  Value *a = graph.addInput(TensorMeta(DType::Float32, {1}), "x");
  Value *b = graph.addInput(TensorMeta(DType::Float32, {1}), "x");
  Value *c = graph.addInput(TensorMeta(DType::Float32, {1}));
  EXPECT_EQ(a->name(), "x");
  EXPECT_NE(b->name(), "x");
  EXPECT_NE(c->name(), a->name());
  EXPECT_NE(c->name(), b->name());
  EXPECT_EQ(graph.inputs().size(), 3u);
}

TEST(Graph, ConstructionRejectsWrongArityAndTypes) {
  Graph graph;
  Value *x = graph.addInput(TensorMeta(DType::Float32, {2}), "x");
  EXPECT_THROW(graph.addOp("aten::add.Tensor", {x}), Error); // missing other
  EXPECT_THROW(graph.addOp("aten::add.Tensor", {x, x, int64_t{1}}), Error);
  EXPECT_THROW(graph.addOp("aten::add.Tensor", {x, x}, {{"beta", int64_t{1}}}),
               Error);
  EXPECT_THROW(graph.addOp("aten::add.Tensor", {x, "text"}), Error);
  EXPECT_THROW(graph.addOp("aten::no_such_op", {x}), Error);
  auto schema = schemaOf(kMaxDim);
  EXPECT_THROW(graph.addExtern(schema, {x}, {}), Error);             // arity
  EXPECT_THROW(graph.addExtern(schema, {x, 1.5, false}, {}), Error); // type
  EXPECT_THROW(graph.addExtern(nullptr, {}, {}), Error);
}

TEST(Graph, ConstructionRejectsValuesOfAnotherGraph) {
  Graph graph, other;
  Value *x = graph.addInput(TensorMeta(DType::Float32, {2}), "x");
  Value *foreign = other.addInput(TensorMeta(DType::Float32, {2}), "foreign");
  EXPECT_THROW(graph.addOp("aten::add.Tensor", {x, foreign}), Error);
  EXPECT_THROW(graph.setOutputs({foreign}), Error);
  auto data = constantOf({1.0f});
  data->bytes.pop_back();
  EXPECT_THROW(graph.addConstant(data), Error);
  EXPECT_THROW(graph.addConstant(nullptr), Error);
}

TEST(Graph, VerifierFindsWrongArityAndTypes) {
  Graph graph;
  Value *x = graph.addInput(TensorMeta(DType::Float32, {2}), "x");
  Node *sum = graph.addOp("aten::add.Tensor", {x, x});
  graph.setOutputs({sum->result()});
  ASSERT_EQ(verifyError(graph), "");

  std::vector<Argument> &arguments = sum->*memberOf(NodeArguments());
  std::vector<Argument> saved = arguments;
  arguments.pop_back();
  EXPECT_NE(
      verifyError(graph).find("aten::add.Tensor expects 3 arguments, got 2"),
      std::string::npos)
      << verifyError(graph);
  arguments = saved;
  arguments[1] = Argument("text");
  EXPECT_NE(verifyError(graph).find("argument 'other' must be Tensor, not str"),
            std::string::npos)
      << verifyError(graph);
}

TEST(Graph, VerifierFindsUseBeforeDefinition) {
  Graph graph;
  Value *x = graph.addInput(TensorMeta(DType::Float32, {2}), "x");
  Node *first = graph.addOp("aten::add.Tensor", {x, x});
  graph.addOp("aten::add.Scalar", {first->result(), 1.0});
  auto &nodes = graph.*memberOf(GraphNodes());
  std::swap(nodes[1], nodes[2]);
  EXPECT_NE(verifyError(graph).find("reads %0 before it is defined"),
            std::string::npos)
      << verifyError(graph);
}

TEST(Graph, VerifierFindsMetadataThatDisagreesWithTheMetaFunction) {
  Graph graph;
  Value *x = graph.addInput(TensorMeta(DType::Float32, {2, 3}), "x");
  Node *sum = graph.addOp("aten::add.Tensor", {x, x});
  graph.setOutputs({sum->result()});
  sum->result()->*memberOf(ValueMeta()) = TensorMeta(DType::Float64, {2, 3});
  EXPECT_NE(verifyError(graph).find("is recorded as f64[2, 3] but the meta "
                                    "function gives f32[2, 3]"),
            std::string::npos)
      << verifyError(graph);
  // Extern nodes carry their metadata on trust: nothing to compare with.
  Graph externs;
  Value *y = externs.addInput(TensorMeta(DType::Float32, {2}), "y");
  externs.addExtern(schemaOf("aten::relu(Tensor self) -> Tensor"), {y},
                    {TensorMeta(DType::Float64, {7})});
  EXPECT_EQ(verifyError(externs), "");
}
