// The CUDA driver is opened at first use: on a machine without it (CI),
// asking for it is a clear error naming what is missing, never a crash.
// Depends on backend/cuda/, GoogleTest.
#include "backend/cuda/CudaDriver.h"
#include "backend/cuda/CudaKernelCode.h"
#include "ir/Error.h"

#include <gtest/gtest.h>

using namespace kiln;

TEST(CudaDriver, MissingDriverIsAClearError) {
  if (backend::cuda::available())
    GTEST_SKIP() << "this machine has a GPU";
  try {
    backend::cuda::driver();
    // A driver without a GPU loads; cuInit then fails, which throws.
  } catch (const Error &error) {
    std::string message = error.what();
    EXPECT_TRUE(message.find("libcuda.so.1") != std::string::npos ||
                message.find("cuInit") != std::string::npos)
        << message;
  }
  backend::cuda::GpuCode code;
  code.ptx = ".version 7.8\n.target sm_80\n.address_size 64\n";
  EXPECT_THROW(backend::cuda::CudaKernelCode(code, 0, nullptr), Error);
  EXPECT_THROW(backend::cuda::check(1, "a test"), Error);
}
