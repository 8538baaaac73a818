// PyTorch's type promotion, on hand-checked pairs.
#include "ir/DType.h"

#include <gtest/gtest.h>

using namespace kiln;

TEST(DType, PromotesLikeTorch) {
  EXPECT_EQ(promoteTypes(DType::Int32, DType::Float32), DType::Float32);
  EXPECT_EQ(promoteTypes(DType::UInt8, DType::Int8), DType::Int16);
  EXPECT_EQ(promoteTypes(DType::Bool, DType::Int8), DType::Int8);
  EXPECT_EQ(promoteTypes(DType::Float16, DType::BFloat16), DType::Float32);
  EXPECT_EQ(promoteTypes(DType::Float64, DType::Complex64), DType::Complex128);
  EXPECT_EQ(promoteTypes(DType::Int64, DType::Complex64), DType::Complex64);
  EXPECT_EQ(promoteTypes(DType::Float16, DType::Int64), DType::Float16);
}

TEST(DType, NamesRoundTrip) {
  for (int i = 0; i < kNumDTypes; ++i) {
    DType dtype = static_cast<DType>(i);
    EXPECT_EQ(dtypeFromName(dtypeName(dtype)), dtype);
    EXPECT_EQ(dtypeFromName("torch." + std::string(dtypeName(dtype))), dtype);
  }
  EXPECT_EQ(dtypeFromName("long"), DType::Int64);
  EXPECT_EQ(dtypeFromName("quint8"), std::nullopt);
}
