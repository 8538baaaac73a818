// Tests of ahead-of-time export without Python: a graph exported with
// exportGraph, its shared library opened with dlopen and run through the C
// API on raw buffers, checked against results computed here; bad tensors and
// weights files give status codes. Needs the system C compiler (skips
// without). Depends on backend/aot/AotExport.h, GoogleTest, libdl.
#include "backend/aot/AotExport.h"
#include "ir/Error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <random>

using namespace kiln;
namespace fs = std::filesystem;

namespace {

// The C API's structs, as the exported header declares them.
struct CTensor {
  void *data;
  int32_t dtype;
  int32_t rank;
  const int64_t *sizes;
  const int64_t *strides;
};

bool haveCompiler() {
  return std::system("cc --version > /dev/null 2>&1") == 0;
}

fs::path freshDirectory(const std::string &name) {
  fs::path directory =
      fs::temp_directory_path() /
      ("kiln-aot-test-" + name + "-" + std::to_string(std::random_device()()));
  fs::remove_all(directory);
  return directory;
}

// An exported library and its C API.
struct Exported {
  void *library = nullptr;
  int (*create)(const char *, int, void **) = nullptr;
  int (*run)(void *, const CTensor *, size_t, CTensor *, size_t) = nullptr;
  void (*destroy)(void *) = nullptr;
  const char *(*lastError)() = nullptr;

  Exported(const fs::path &directory, const std::string &name) {
    library = dlopen((directory / (name + ".so")).c_str(), RTLD_NOW);
    if (!library)
      return;
    std::string prefix = "kiln_" + name + "_";
    create = reinterpret_cast<decltype(create)>(
        dlsym(library, (prefix + "create").c_str()));
    run = reinterpret_cast<decltype(run)>(
        dlsym(library, (prefix + "run").c_str()));
    destroy = reinterpret_cast<decltype(destroy)>(
        dlsym(library, (prefix + "destroy").c_str()));
    lastError = reinterpret_cast<decltype(lastError)>(
        dlsym(library, (prefix + "last_error").c_str()));
  }
  ~Exported() {
    if (library)
      dlclose(library);
  }
};

} // namespace

// y = (x + w) * 3 with a weight w: x from the caller, w from the weights file.
TEST(AotExport, RunsThroughTheCApiAndRefusesBadInput) {
  if (!haveCompiler())
    GTEST_SKIP() << "no C compiler";
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {3, 5}));
  Value *w = graph->addInput(TensorMeta(DType::Float32, {5}));
  Value *sum = graph->addOp("aten::add.Tensor", {x, w}, {})->result(0);
  Value *y =
      graph->addOp("aten::mul.Scalar", {sum, Argument(3.0)}, {})->result(0);
  graph->setOutputs({y});
  std::vector<float> weight{1, 2, 3, 4, 5};
  backend::ExportOptions options;
  options.name = "scaled";
  options.directory = freshDirectory("scaled").string();
  options.inputs = {
      {"x", false, 0, nullptr},
      {"w", true, -1, reinterpret_cast<const uint8_t *>(weight.data())}};
  options.outputNames = {"y"};
  backend::ExportResult result = backend::exportGraph(graph, options);
  EXPECT_EQ(result.files.size(), 6u);

  Exported exported(options.directory, "scaled");
  ASSERT_NE(exported.library, nullptr) << dlerror();
  void *model = nullptr;
  std::string weights = options.directory + "/scaled.weights";
  ASSERT_EQ(exported.create(weights.c_str(), 2, &model), 0)
      << exported.lastError();
  std::vector<float> input(15);
  for (size_t i = 0; i < input.size(); ++i)
    input[i] = static_cast<float>(i) * 0.5f;
  int64_t sizes[] = {3, 5};
  CTensor in{input.data(), 8, 2, sizes, nullptr};
  CTensor out{};
  ASSERT_EQ(exported.run(model, &in, 1, &out, 1), 0) << exported.lastError();
  ASSERT_EQ(out.rank, 2);
  const float *values = static_cast<const float *>(out.data);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j)
      EXPECT_FLOAT_EQ(values[i * out.strides[0] + j * out.strides[1]],
                      (input[i * 5 + j] + weight[j]) * 3);

  int64_t wrongSizes[] = {3, 4};
  CTensor wrong{input.data(), 8, 2, wrongSizes, nullptr};
  EXPECT_EQ(exported.run(model, &wrong, 1, &out, 1), 1);
  EXPECT_NE(std::string(exported.lastError()).find("size 4 in dimension 1"),
            std::string::npos);
  CTensor wrongType{input.data(), 9, 2, sizes, nullptr};
  EXPECT_EQ(exported.run(model, &wrongType, 1, &out, 1), 1);
  CTensor noData{nullptr, 8, 2, sizes, nullptr};
  EXPECT_EQ(exported.run(model, &noData, 1, &out, 1), 1);
  EXPECT_EQ(exported.run(nullptr, &in, 1, &out, 1), 1);
  exported.destroy(model);

  // A truncated weights file is refused; so is none at all.
  std::string truncated = options.directory + "/truncated.weights";
  fs::copy_file(weights, truncated);
  fs::resize_file(truncated, fs::file_size(truncated) - 8);
  EXPECT_EQ(exported.create(truncated.c_str(), 1, &model), 3);
  EXPECT_EQ(model, nullptr);
  EXPECT_EQ(exported.create((options.directory + "/none").c_str(), 1, &model),
            2);
  EXPECT_EQ(exported.create(nullptr, 1, &model), 1);
  fs::remove_all(options.directory);
}

TEST(AotExport, BadOptionsAreErrorsAndWriteNothing) {
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2}));
  graph->setOutputs({graph->addOp("aten::neg", {x}, {})->result(0)});
  backend::ExportOptions options;
  options.directory = freshDirectory("bad").string();
  options.inputs = {{"x", false, 0, nullptr}};
  options.outputNames = {"y"};
  options.name = "1st";
  EXPECT_THROW(backend::exportGraph(graph, options), Error);
  options.name = "ok";
  options.cpu = "no-such-cpu";
  EXPECT_THROW(backend::exportGraph(graph, options), Error);
  options.cpu.clear();
  options.outputNames.clear();
  EXPECT_THROW(backend::exportGraph(graph, options), Error);
  EXPECT_FALSE(fs::exists(fs::path(options.directory) / "ok.so"));
  fs::remove_all(options.directory);
}

TEST(AotExport, WeightsChecksumReadsWordsThenBytes) {
  std::vector<uint8_t> bytes(13);
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<uint8_t>(i * 37);
  uint64_t whole = backend::weightsChecksum(bytes.data(), bytes.size());
  bytes[12] ^= 1;
  EXPECT_NE(backend::weightsChecksum(bytes.data(), bytes.size()), whole);
  EXPECT_EQ(backend::weightsChecksum(bytes.data(), 0), 0xcbf29ce484222325ull);
}
