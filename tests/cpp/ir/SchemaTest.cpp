// The schema parser and argument normalisation, on torch's own schema text.
#include "ir/Schema.h"
#include "ir/Error.h"

#include <gtest/gtest.h>

using namespace kiln;

TEST(Schema, ParsesArgumentsDefaultsAndKeywordOnly) {
  OpSchema schema = parseSchema(
      "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
  EXPECT_EQ(schema.qualifiedName(), "aten::add.Tensor");
  ASSERT_EQ(schema.arguments.size(), 3u);
  EXPECT_EQ(schema.arguments[2].name, "alpha");
  EXPECT_TRUE(schema.arguments[2].kwargOnly);
  EXPECT_EQ(*schema.arguments[2].defaultValue, Argument(int64_t{1}));
  EXPECT_EQ(schema.returns.size(), 1u);
  EXPECT_FALSE(schema.isView());
}

TEST(Schema, RoundTripsThroughItsText) {
  const char *texts[] = {
      "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> "
      "Tensor",
      "aten::transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)",
      "aten::max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor "
      "values, Tensor indices)",
      "aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, "
      "ScalarType? dtype=None) -> Tensor",
      "aten::index.Tensor(Tensor self, Tensor?[] indices) -> Tensor",
      "aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) "
      "-> Tensor(a)[]",
      "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> "
      "Tensor(a!)",
  };
  for (const char *text : texts) {
    OpSchema schema = parseSchema(text);
    OpSchema again = parseSchema(schema.str());
    EXPECT_EQ(again.str(), schema.str()) << text;
  }
  EXPECT_TRUE(parseSchema(texts[1]).isView());
  EXPECT_TRUE(parseSchema(texts[6]).isMutable());
}

TEST(Schema, ParsesListsAndUnusualDefaults) {
  OpSchema conv = parseSchema(
      "convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, "
      "SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] "
      "output_padding, SymInt groups) -> Tensor");
  EXPECT_TRUE(conv.arguments[2].type.optional);
  EXPECT_TRUE(conv.arguments[3].type.isList);
  OpSchema pool = parseSchema(
      "max_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] "
      "padding=0, int[2] dilation=1, bool ceil_mode=False) -> Tensor");
  EXPECT_EQ(*pool.arguments[3].defaultValue,
            Argument(std::vector<int64_t>{0, 0}));
  EXPECT_EQ(*pool.arguments[2].defaultValue, Argument(std::vector<int64_t>{}));
  OpSchema norm = parseSchema(
      "native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? "
      "weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)");
  EXPECT_EQ(norm.returns.size(), 3u);
  OpSchema gelu =
      parseSchema("gelu(Tensor self, *, str approximate='none') -> Tensor");
  EXPECT_EQ(*gelu.arguments[1].defaultValue, Argument("none"));
  OpSchema mse = parseSchema("mse_loss(Tensor self, Tensor target, int "
                             "reduction=Mean) -> Tensor");
  EXPECT_EQ(*mse.arguments[2].defaultValue, Argument(int64_t{1}));
}

TEST(Schema, NormalizesPositionalAndKeywordArguments) {
  OpSchema schema = parseSchema(
      "arange.start(Scalar start, Scalar end, *, ScalarType? dtype=None, "
      "Layout? layout=None, Device? device=None, bool? pin_memory=None) -> "
      "Tensor");
  std::vector<Argument> args =
      schema.normalize({Argument(int64_t{1}), Argument(2.5)},
                       {{"dtype", Argument(DType::Float64)}});
  ASSERT_EQ(args.size(), 6u);
  EXPECT_EQ(args[1], Argument(2.5));
  EXPECT_EQ(args[2], Argument(DType::Float64));
  EXPECT_TRUE(args[4].isNone());
  OpSchema pool = parseSchema("max_pool2d(Tensor self, int[2] kernel_size, "
                              "int[2] stride=[]) -> Tensor");
  EXPECT_EQ(pool.arguments[1].type.fixedListSize, 2);
}

TEST(Schema, RejectsWrongArguments) {
  OpSchema schema = parseSchema(
      "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
  EXPECT_THROW(schema.normalize({Argument::none()}, {}), Error);
  EXPECT_THROW(schema.normalize({}, {{"beta", Argument(1.0)}}), Error);
  EXPECT_THROW(schema.normalize({Argument("x"), Argument(2.0)}, {}), Error);
  // add, sub, mul and div take a Python number for a tensor (torch's wrapped
  // number), as in aot_autograd's sub.Tensor(x, 1.0); other ops do not.
  EXPECT_NO_THROW(schema.normalize({Argument(1.0), Argument(2.0)}, {}));
  EXPECT_THROW(parseSchema("maximum(Tensor self, Tensor other) -> Tensor")
                   .normalize({Argument(1.0), Argument(2.0)}, {}),
               Error);
  EXPECT_THROW(parseSchema("add.Tensor(Tensor self"), Error);
  EXPECT_THROW(parseSchema("add(Blob self) -> Tensor"), Error);
}
