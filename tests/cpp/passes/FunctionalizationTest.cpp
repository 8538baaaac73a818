// In-place ops on the graph's own tensors become functional ops; writes
// that something else could see stay in-place ops.
#include "passes/Functionalization.h"
#include "ir/Graph.h"

#include <gtest/gtest.h>

#include <memory>

using namespace kiln;

namespace {

std::shared_ptr<const OpSchema> schemaOf(const char *text) {
  return std::make_shared<const OpSchema>(parseSchema(text));
}

const char *const kAddInPlace = "aten::add_.Tensor(Tensor(a!) self, Tensor "
                                "other, *, Scalar alpha=1) -> Tensor(a!)";
const char *const kReluInPlace = "aten::relu_(Tensor(a!) self) -> Tensor(a!)";
const char *const kTranspose = "aten::t(Tensor(a) self) -> Tensor(a)";

// `op_(self, others...)` as the frontend records it: an extern whose result
// is self's storage.
Value *inPlace(Graph &graph, const char *schemaText,
               std::vector<Argument> positional) {
  auto schema = schemaOf(schemaText);
  TensorMeta meta = positional.at(0).toTensor()->meta();
  return graph.addExtern(schema, schema->normalize(positional, {}), {meta})
      ->result();
}

// The qualified names of the graph's op and extern nodes, in order, an
// extern's marked "extern ".
std::vector<std::string> opsOf(const Graph &graph) {
  std::vector<std::string> names;
  for (const auto &node : graph.nodes())
    if (node->schema())
      names.push_back((node->isExtern() ? "extern " : "") +
                      node->schema()->qualifiedName());
  return names;
}

} // namespace

// y = x * 2; z = y.relu_(); y.add_(x); return y * 3, z: the writes are
// relu and add, and the readers after each read its result (z is y: at
// the end it reads the add's, as y does).
TEST(Functionalization, WritesToTheGraphsOwnTensorsBecomeFunctionalOps) {
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {4, 3}), "x");
  Value *y = graph->addOp("aten::mul.Scalar", {x, 2.0})->result();
  Value *z = inPlace(*graph, kReluInPlace, {y});
  inPlace(*graph, kAddInPlace, {y, x});
  Value *tripled = graph->addOp("aten::mul.Scalar", {y, 3.0})->result();
  graph->setOutputs({tripled, z});
  std::shared_ptr<Graph> result = passes::functionalizeInPlaceOps(graph);
  ASSERT_NE(result, graph);
  result->verify();
  EXPECT_EQ(opsOf(*result),
            (std::vector<std::string>{"aten::mul.Scalar", "aten::relu",
                                      "aten::add.Tensor", "aten::mul.Scalar"}));
  const auto &nodes = result->nodes();
  Value *relu = nodes[2]->result(), *add = nodes[3]->result();
  EXPECT_EQ(nodes[3]->arguments()[0].toTensor(), relu);
  EXPECT_EQ(nodes[4]->arguments()[0].toTensor(), add);
  EXPECT_EQ(result->outputs()[1].toTensor(), add);
  EXPECT_EQ(result->outputs()[0].toTensor(), nodes[4]->result());
}

// A view taken after the last write reads the written tensor; one taken
// before the write and read after it is taken again of the written tensor.
TEST(Functionalization, ViewsReadAfterAWriteSeeIt) {
  for (bool viewFirst : {false, true}) {
    auto graph = std::make_shared<Graph>();
    Value *x = graph->addInput(TensorMeta(DType::Float32, {4, 3}), "x");
    Value *y = graph->addOp("aten::mul.Scalar", {x, 2.0})->result();
    auto transpose = schemaOf(kTranspose);
    TensorMeta transposed(DType::Float32, {3, 4}, {1, 3});
    Value *view = nullptr;
    if (viewFirst)
      view = graph->addExtern(transpose, {y}, {transposed})->result();
    inPlace(*graph, kReluInPlace, {y});
    if (!viewFirst)
      view = graph->addExtern(transpose, {y}, {transposed})->result();
    graph->setOutputs({view});
    std::shared_ptr<Graph> result = passes::functionalizeInPlaceOps(graph);
    ASSERT_NE(result, graph);
    result->verify();
    std::vector<std::string> expected = {"aten::mul.Scalar", "aten::relu",
                                         "extern aten::t"};
    if (viewFirst)
      expected.insert(expected.begin() + 1, "extern aten::t");
    EXPECT_EQ(opsOf(*result), expected);
    const Node &relu = *result->nodes()[viewFirst ? 3 : 2];
    const Node &taken = *result->nodes().back();
    EXPECT_EQ(taken.arguments()[0].toTensor(), relu.result());
    EXPECT_EQ(result->outputs()[0].toTensor(), taken.result());
  }
}

// y = x * 2; y.t().relu_(); return y: the write through the view is its
// functional op of the view, scattered into y (as_strided_scatter with the
// view's sizes, strides and offset), and y reads the scatter.
TEST(Functionalization, WritesThroughAViewScatterIntoItsBase) {
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {4, 3}), "x");
  Value *y = graph->addOp("aten::mul.Scalar", {x, 2.0})->result();
  auto transpose = schemaOf(kTranspose);
  Value *view = graph
                    ->addExtern(transpose, {y},
                                {TensorMeta(DType::Float32, {3, 4}, {1, 3})})
                    ->result();
  inPlace(*graph, kReluInPlace, {view});
  graph->setOutputs({y});
  std::shared_ptr<Graph> result = passes::functionalizeInPlaceOps(graph);
  ASSERT_NE(result, graph);
  result->verify();
  EXPECT_EQ(opsOf(*result), (std::vector<std::string>{
                                "aten::mul.Scalar", "extern aten::t",
                                "aten::relu", "aten::as_strided_scatter"}));
  const Node &scatter = *result->nodes().back();
  EXPECT_EQ(scatter.arguments()[0].toTensor(), result->nodes()[1]->result());
  EXPECT_EQ(scatter.arguments()[2].toIntList(), (Shape{3, 4}));
  EXPECT_EQ(scatter.arguments()[3].toIntList(), (Shape{1, 3}));
  EXPECT_EQ(result->outputs()[0].toTensor(), scatter.result());
}

// Writes others can see stay: to a graph input and to a constant; a write whose
// functional op would change the tensor's dtype (float16 plus float32 is
// float32; add_ keeps float16) stays too, and so do the other writes to a
// tensor that one write to keeps in place (an op with no functional form the
// registry knows).
TEST(Functionalization, WritesOthersCanSeeOrThatChangeTheDtypeStay) {
  auto check = [](std::shared_ptr<Graph> graph) {
    EXPECT_EQ(passes::functionalizeInPlaceOps(graph), graph) << graph->str();
  };
  {
    auto graph = std::make_shared<Graph>();
    Value *x = graph->addInput(TensorMeta(DType::Float32, {4}), "x");
    graph->setOutputs({inPlace(*graph, kReluInPlace, {x})});
    check(graph);
  }
  {
    auto graph = std::make_shared<Graph>();
    Value *x = graph->addInput(TensorMeta(DType::Float32, {4}), "x");
    Value *half =
        graph
            ->addOp(
                "aten::mul.Scalar",
                {graph->addInput(TensorMeta(DType::Float16, {4}), "h"), 2.0})
            ->result();
    graph->setOutputs({inPlace(*graph, kAddInPlace, {half, x})});
    check(graph);
  }
  {
    auto graph = std::make_shared<Graph>();
    Value *x = graph->addInput(TensorMeta(DType::Float32, {4}), "x");
    Value *y = graph->addOp("aten::mul.Scalar", {x, 2.0})->result();
    inPlace(*graph,
            "aten::exponential_(Tensor(a!) self, float lambd=1) -> "
            "Tensor(a!)",
            {y});
    inPlace(*graph, kReluInPlace, {y});
    graph->setOutputs({y});
    check(graph);
  }
}
