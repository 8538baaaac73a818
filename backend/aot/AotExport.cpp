// Ahead-of-time export: plans the graph with every op native, emits its
// kernels for the chosen CPU into one position-independent object file, writes
// the program's tables into the C runtime (backend/aot/AotRuntime.c) and
// compiles and links them with the system C compiler.
// Depends on backend/Pipeline.h, backend/cpu/*, passes/Scheduler.h, LLVM.
#include "backend/aot/AotExport.h"

#include "backend/LlvmTargets.h"
#include "backend/Pipeline.h"
#include "backend/aot/AotRuntimeSource.h"
#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/CpuContraction.h"
#include "backend/cpu/CpuKernelEmitter.h"
#include "backend/cpu/CpuSchedule.h"
#include "backend/cpu/HostTarget.h"
#include "backend/cpu/MathLibrary.h"
#include "ir/Error.h"
#include "ir/Logging.h"
#include "passes/Scheduler.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/TargetParser/Host.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>
#include <unordered_set>

namespace kiln::backend {

namespace fs = std::filesystem;
using loop::Buffer;
using loop::BufferKind;

uint64_t weightsChecksum(const uint8_t *bytes, uint64_t count) {
  uint64_t hash = 0xcbf29ce484222325ull;
  uint64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    uint64_t word = 0;
    for (int b = 7; b >= 0; --b)
      word = (word << 8) | bytes[i + b];
    hash ^= word;
    hash *= 0x100000001b3ull;
  }
  for (; i < count; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

namespace {

// An export is compiled for fixed sizes.
int64_t constantSize(SymSize size, const char *what) {
  if (!size || !size->isConstant())
    throw Unsupported(std::string("kiln export: ") + what +
                      " varies between calls; exports have fixed sizes");
  return size->value();
}

// Mirrors the C runtime's buffer kinds.
enum RuntimeBufferKind { kInput, kWeight, kWorkspace, kOwned, kView };

bool isIdentifier(const std::string &name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0])))
    return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_')
      return false;
  return true;
}

// The bytes a layout spans from its element at offset 0.
int64_t spanBytes(const TensorMeta &meta) {
  if (meta.numel() == 0)
    return 0;
  int64_t last = 0;
  for (size_t d = 0; d < meta.sizes.size(); ++d)
    last += (meta.sizes[d] - 1) * meta.strides[d];
  return (last + 1) * itemSize(meta.dtype);
}

std::string cString(const std::string &text) {
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      quoted += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\%03o", c);
      quoted += escaped;
      continue;
    }
    quoted += c;
  }
  return quoted + "\"";
}

std::string shellQuote(const std::string &text) {
  std::string quoted = "'";
  for (char c : text)
    quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// Runs a shell command; throws kiln::Error with its output when it fails.
void runCommand(const std::string &command, const std::string &what) {
  FILE *pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe)
    throw Error("export: cannot run " + what + " (" + command + ")");
  std::string output;
  char chunk[4096];
  while (size_t read = std::fread(chunk, 1, sizeof chunk, pipe))
    output.append(chunk, read);
  int status = pclose(pipe);
  if (status != 0)
    throw Error("export: " + what + " failed (" + command + "):\n" + output);
}

std::string compilerCommand(const ExportOptions &options) {
  if (!options.compiler.empty())
    return options.compiler;
  if (const char *cc = std::getenv("CC"); cc && *cc)
    return cc;
  return "cc";
}

// The CPU the code is for: its LLVM target machine (position-independent
// code) and the vector unit the code generator targets.
struct AotTarget {
  std::unique_ptr<llvm::TargetMachine> machine;
  HostTarget host;
};

AotTarget makeTarget(const std::string &cpu) {
  initializeLlvmTargets();
  std::string triple = llvm::sys::getProcessTriple();
  std::string problem;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(triple, problem);
  if (!target)
    throw Error("export: no LLVM target for " + triple + ": " + problem);
  AotTarget result;
  const HostTarget &host = hostTarget();
  if (cpu.empty() || cpu == "native" || cpu == "host") {
    result.host = host;
  } else {
    result.host.cpuName = cpu;
    result.host.unroll = host.unroll;
    result.host.streamingBytes = int64_t(16) << 20;
    result.host.prefetchBytes = host.prefetchBytes;
  }
  llvm::TargetOptions targetOptions;
  result.machine.reset(target->createTargetMachine(
      triple, result.host.cpuName, result.host.features, targetOptions,
      llvm::Reloc::PIC_, std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  if (!result.machine)
    throw Error("export: LLVM cannot make code for the CPU '" + cpu + "'");
  const llvm::MCSubtargetInfo *info = result.machine->getMCSubtargetInfo();
  if (!info->isCPUStringValid(result.host.cpuName))
    throw Error("export: '" + cpu +
                "' is not a CPU LLVM knows (try x86-64, x86-64-v2, "
                "x86-64-v3, x86-64-v4, skylake-avx512, znver3, or leave "
                "target unset for this machine's CPU)");
  if (!cpu.empty() && cpu != "native" && cpu != "host")
    result.host.vectorBits = info->checkFeatures("+avx512f") ? 512
                             : info->checkFeatures("+avx2")  ? 256
                                                             : 128;
  return result;
}

// A weight of the exported program: where its bytes are now.
struct WeightEntry {
  std::string name;
  const uint8_t *data = nullptr;
  int64_t bytes = 0;
};

// The weights file's image (see the C runtime's check_weights).
std::vector<uint8_t> weightsImage(const std::vector<WeightEntry> &weights,
                                  uint64_t fingerprint) {
  auto put64 = [](std::vector<uint8_t> &out, size_t at, uint64_t value) {
    for (int i = 0; i < 8; ++i)
      out[at + i] = static_cast<uint8_t>(value >> (8 * i));
  };
  uint64_t headerBytes = 48 + 16 * weights.size();
  uint64_t start = (headerBytes + 63) / 64 * 64;
  std::vector<uint64_t> offsets;
  uint64_t payload = 0;
  for (const WeightEntry &weight : weights) {
    offsets.push_back(payload);
    payload = (payload + weight.bytes + 63) / 64 * 64;
  }
  std::vector<uint8_t> image(start + payload, 0);
  std::memcpy(image.data(), "KILNWTS", 8);
  image[8] = 1; // version
  uint32_t count = static_cast<uint32_t>(weights.size());
  for (int i = 0; i < 4; ++i)
    image[12 + i] = static_cast<uint8_t>(count >> (8 * i));
  put64(image, 16, fingerprint);
  put64(image, 24, payload);
  for (size_t w = 0; w < weights.size(); ++w) {
    put64(image, 48 + 16 * w, offsets[w]);
    put64(image, 48 + 16 * w + 8, weights[w].bytes);
    if (weights[w].bytes > 0)
      std::memcpy(image.data() + start + offsets[w], weights[w].data,
                  weights[w].bytes);
  }
  put64(image, 32, weightsChecksum(image.data() + start, payload));
  return image;
}

std::string shapeText(const Shape &sizes) {
  std::string text = "[";
  for (size_t d = 0; d < sizes.size(); ++d)
    text += (d ? ", " : "") + std::to_string(sizes[d]);
  return text + "]";
}

// One C API tensor (an input or an output) as the tables describe it.
struct ApiTensor {
  std::string name;
  TensorMeta meta;
  int64_t buffer = -1;
};

std::string headerText(const std::string &name,
                       const std::vector<ApiTensor> &inputs,
                       const std::vector<ApiTensor> &outputs,
                       const std::string &cpu) {
  std::string guard = "KILN_" + name + "_H";
  for (char &c : guard)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::ostringstream out;
  out << "/* " << name << ".h: the C interface of the kiln export '" << name
      << "'.\n"
      << " * Compiled for the CPU '" << cpu
      << "'. Shapes are static: each input must have exactly\n"
      << " * the sizes below (and, for dimensions of size above 1, the "
         "strides).\n *\n";
  for (size_t i = 0; i < inputs.size(); ++i)
    out << " *   input " << i << "  " << inputs[i].name << ": "
        << dtypeName(inputs[i].meta.dtype) << shapeText(inputs[i].meta.sizes)
        << "\n";
  for (size_t i = 0; i < outputs.size(); ++i)
    out << " *   output " << i << " " << outputs[i].name << ": "
        << dtypeName(outputs[i].meta.dtype) << shapeText(outputs[i].meta.sizes)
        << "\n";
  out << " *\n * Every function that can fail returns a kiln_status; on "
         "failure\n"
         " * kiln_"
      << name
      << "_last_error() says why (per thread). Nothing aborts.\n"
         " * Link with: <name>.o -lm -lpthread, or the shared library.\n"
         " */\n"
      << "#ifndef " << guard << "\n#define " << guard << "\n\n"
      << R"(#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef KILN_AOT_COMMON_TYPES
#define KILN_AOT_COMMON_TYPES
typedef enum kiln_status {
  KILN_OK = 0,
  KILN_ERROR_INVALID_ARGUMENT = 1, /* a wrong tensor, count or pointer */
  KILN_ERROR_IO = 2,               /* the weights file cannot be read */
  KILN_ERROR_BAD_WEIGHTS = 3,      /* corrupted, truncated or another model's */
  KILN_ERROR_OUT_OF_MEMORY = 4,
  KILN_ERROR_SYSTEM = 5 /* a thread could not start */
} kiln_status;

/* torch's dtypes, as kiln numbers them. */
typedef enum kiln_dtype {
  KILN_BOOL = 0,
  KILN_UINT8 = 1,
  KILN_INT8 = 2,
  KILN_INT16 = 3,
  KILN_INT32 = 4,
  KILN_INT64 = 5,
  KILN_FLOAT16 = 6,
  KILN_BFLOAT16 = 7,
  KILN_FLOAT32 = 8,
  KILN_FLOAT64 = 9
} kiln_dtype;

/* A tensor: `data` points at its element [0, ..., 0]; sizes and strides
   (in elements, as torch counts them) have `rank` entries; strides may be
   NULL for a contiguous (row-major) input. */
typedef struct kiln_tensor {
  void *data;
  int32_t dtype;
  int32_t rank;
  const int64_t *sizes;
  const int64_t *strides;
} kiln_tensor;

typedef struct kiln_tensor_info {
  const char *name;
  int32_t dtype;
  int32_t rank;
  const int64_t *sizes;
  const int64_t *strides;
} kiln_tensor_info;
#endif

#if defined(__GNUC__)
#define KILN_AOT_EXPORT __attribute__((visibility("default")))
#else
#define KILN_AOT_EXPORT
#endif

)";
  std::string p = "kiln_" + name;
  out << "typedef struct " << p << " " << p << ";\n\n"
      << "/* Loads and checks the weights (NULL: the embedded ones, where the\n"
         "   export embedded them), starts `num_threads` threads (0: "
         "$KILN_NUM_THREADS,\n   else every core) and packs the weights of "
         "matrix products for them\n   (a second copy of those weights, "
         "read by every run). */\n"
      << "KILN_AOT_EXPORT kiln_status " << p
      << "_create(const char *weights_path, int num_threads,\n    " << p
      << " **model);\n\n"
      << "/* Runs the model. `outputs` receives one tensor per output; their\n"
         "   memory belongs to the model and stays valid until the next run "
         "or\n   destroy (an output that is an input, or a view of one, points "
         "into it).\n   One run at a time per model. Ids an input holds "
         "for an embedding, index_select\n   or gather must lie in the "
         "table: one outside it is KILN_ERROR_INVALID_ARGUMENT\n   (\"index "
         "out of range in self\"), before any step runs. */\n"
      << "KILN_AOT_EXPORT kiln_status " << p << "_run(" << p
      << " *model, const kiln_tensor *inputs,\n    size_t num_inputs, "
         "kiln_tensor *outputs, size_t num_outputs);\n\n"
      << "KILN_AOT_EXPORT void " << p << "_destroy(" << p << " *model);\n\n"
      << "/* Why the last failing call on this thread failed. */\n"
      << "KILN_AOT_EXPORT const char *" << p << "_last_error(void);\n\n"
      << "KILN_AOT_EXPORT size_t " << p << "_num_inputs(void);\n"
      << "KILN_AOT_EXPORT size_t " << p << "_num_outputs(void);\n"
      << "KILN_AOT_EXPORT kiln_status " << p
      << "_input_info(size_t index, kiln_tensor_info *info);\n"
      << "KILN_AOT_EXPORT kiln_status " << p
      << "_output_info(size_t index, kiln_tensor_info *info);\n\n"
      << "#ifdef __cplusplus\n}\n#endif\n\n#endif\n";
  return out.str();
}

// A driver that reads each input from a raw file (row-major), runs the
// model and writes each output to a raw file: the example of the C API, and
// what the tests run.
std::string mainText(const std::string &name) {
  std::string p = "kiln_" + name;
  std::string text = R"(/* Example driver of the kiln export '@NAME@'.
 *   cc -O2 main.c @NAME@.o -lm -lpthread -o @NAME@_main
 *   ./@NAME@_main @NAME@.weights [input0.bin ...] [-o output_prefix] [-r runs]
 * Each input file holds the input's elements in row-major order (its dtype,
 * native byte order); inputs without a file are filled with ones. With -o,
 * output i is written to <output_prefix><i>.bin the same way. With -r, the
 * model runs that many more times and the mean time of a run is printed. */
#define _POSIX_C_SOURCE 200809L
#include "@NAME@.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

static size_t item_size(int32_t dtype) {
  static const size_t sizes[] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8};
  return dtype >= 0 && dtype < 10 ? sizes[dtype] : 1;
}

/* Copies between row-major `packed` and the strided `data`, element by
   element over all `rank` dimensions. */
static void copy_strided(char *data, char *packed, const kiln_tensor_info *t,
                         int to_strided) {
  size_t item = item_size(t->dtype), count = 1;
  int64_t index[16] = {0};
  for (int d = 0; d < t->rank; ++d)
    count *= (size_t)t->sizes[d];
  for (size_t n = 0; n < count; ++n) {
    int64_t offset = 0;
    for (int d = 0; d < t->rank; ++d)
      offset += index[d] * t->strides[d];
    if (to_strided)
      memcpy(data + offset * (int64_t)item, packed + n * item, item);
    else
      memcpy(packed + n * item, data + offset * (int64_t)item, item);
    for (int d = t->rank - 1; d >= 0 && ++index[d] == t->sizes[d]; --d)
      index[d] = 0;
  }
}

static size_t span_elements(const kiln_tensor_info *t) {
  size_t last = 0;
  for (int d = 0; d < t->rank; ++d) {
    if (t->sizes[d] == 0)
      return 0;
    last += (size_t)((t->sizes[d] - 1) * t->strides[d]);
  }
  return last + 1;
}

int main(int argc, char **argv) {
  const char *output_prefix = NULL;
  const char *files[64];
  int file_count = 0, runs = 0;
  for (int a = 2; a < argc; ++a) {
    if (strcmp(argv[a], "-o") == 0 && a + 1 < argc)
      output_prefix = argv[++a];
    else if (strcmp(argv[a], "-r") == 0 && a + 1 < argc)
      runs = atoi(argv[++a]);
    else if (file_count < 64)
      files[file_count++] = argv[a];
  }
  if (argc < 2) {
    fprintf(stderr, "usage: %s WEIGHTS [input.bin ...] [-o prefix]\n", argv[0]);
    return 2;
  }
  @P@ *model = NULL;
  if (@P@_create(argv[1], 0, &model) != KILN_OK) {
    fprintf(stderr, "%s\n", @P@_last_error());
    return 1;
  }
  size_t num_inputs = @P@_num_inputs(), num_outputs = @P@_num_outputs();
  kiln_tensor *inputs = calloc(num_inputs + 1, sizeof(kiln_tensor));
  kiln_tensor *outputs = calloc(num_outputs + 1, sizeof(kiln_tensor));
  int status = 0;
  for (size_t i = 0; i < num_inputs && status == 0; ++i) {
    kiln_tensor_info info;
    @P@_input_info(i, &info);
    size_t item = item_size(info.dtype), count = 1;
    for (int d = 0; d < info.rank; ++d)
      count *= (size_t)info.sizes[d];
    char *packed = calloc(count + 1, item);
    if ((int)i < file_count) {
      FILE *file = fopen(files[i], "rb");
      if (!file || fread(packed, item, count, file) != count) {
        fprintf(stderr, "cannot read %zu elements of input %zu from %s\n",
                count, i, files[i]);
        status = 1;
      }
      if (file)
        fclose(file);
    } else if (info.dtype == KILN_FLOAT32) {
      for (size_t n = 0; n < count; ++n)
        ((float *)packed)[n] = 1.0f;
    }
    char *data = calloc(span_elements(&info) + 1, item);
    copy_strided(data, packed, &info, 1);
    free(packed);
    inputs[i] = (kiln_tensor){data, info.dtype, info.rank, info.sizes,
                              info.strides};
  }
  if (status == 0 &&
      @P@_run(model, inputs, num_inputs, outputs, num_outputs) != KILN_OK) {
    fprintf(stderr, "%s\n", @P@_last_error());
    status = 1;
  }
  if (status == 0 && runs > 0) {
    double start = seconds();
    for (int r = 0; r < runs && status == 0; ++r)
      status = @P@_run(model, inputs, num_inputs, outputs, num_outputs) != KILN_OK;
    printf("mean run time: %.1f us over %d runs\n",
           1e6 * (seconds() - start) / runs, runs);
  }
  for (size_t o = 0; o < num_outputs && status == 0; ++o) {
    kiln_tensor_info info = {"", outputs[o].dtype, outputs[o].rank,
                             outputs[o].sizes, outputs[o].strides};
    size_t item = item_size(info.dtype), count = 1;
    for (int d = 0; d < info.rank; ++d)
      count *= (size_t)info.sizes[d];
    char *packed = calloc(count + 1, item);
    copy_strided(outputs[o].data, packed, &info, 0);
    printf("output %zu: %zu elements", o, count);
    if (info.dtype == KILN_FLOAT32 && count > 0)
      printf(", first %g", ((float *)packed)[0]);
    printf("\n");
    if (output_prefix) {
      char path[4096];
      snprintf(path, sizeof path, "%s%zu.bin", output_prefix, o);
      FILE *file = fopen(path, "wb");
      if (!file || fwrite(packed, item, count, file) != count) {
        fprintf(stderr, "cannot write %s\n", path);
        status = 1;
      }
      if (file)
        fclose(file);
    }
    free(packed);
  }
  for (size_t i = 0; i < num_inputs; ++i)
    free(inputs[i].data);
  free(inputs);
  free(outputs);
  @P@_destroy(model);
  return status;
}
)";
  auto replaceAll = [&](const std::string &from, const std::string &to) {
    for (size_t at = text.find(from); at != std::string::npos;
         at = text.find(from, at + to.size()))
      text.replace(at, from.size(), to);
  };
  replaceAll("@NAME@", name);
  replaceAll("@P@", p);
  return text;
}

std::string readmeText(const std::string &name,
                       const std::vector<ApiTensor> &inputs,
                       const std::vector<ApiTensor> &outputs,
                       const std::string &cpu, bool embedded) {
  std::ostringstream out;
  out << "# " << name << ": a kiln export\n\n"
      << "Runs with no Python, torch or LLVM: it needs libc, libm and "
         "libpthread only. Compiled for the CPU `"
      << cpu << "`.\n\n"
      << "| file | what |\n| --- | --- |\n"
      << "| `" << name << ".h` | the C interface (read it first) |\n"
      << "| `" << name
      << ".o` | the program and its kernels, position-independent |\n"
      << "| `" << name << ".so` | the same as a shared library |\n"
      << "| `" << name << ".weights` | the weights, checked on load |\n"
      << "| `main.c` | an example driver |\n\n"
      << "Build and run the example:\n\n```\ncc -O2 main.c " << name
      << ".o -lm -lpthread -o " << name << "_main && ./" << name << "_main "
      << name << ".weights\n```\n\n"
      << (embedded ? "The weights are also embedded in the object: `kiln_" +
                         name + "_create(NULL, 0, &model)` uses them.\n\n"
                   : std::string())
      << "Inputs (static shapes):\n\n";
  for (size_t i = 0; i < inputs.size(); ++i)
    out << "- " << i << ": `" << inputs[i].name << "` "
        << dtypeName(inputs[i].meta.dtype) << shapeText(inputs[i].meta.sizes)
        << "\n";
  out << "\nOutputs:\n\n";
  for (size_t i = 0; i < outputs.size(); ++i)
    out << "- " << i << ": `" << outputs[i].name << "` "
        << dtypeName(outputs[i].meta.dtype) << shapeText(outputs[i].meta.sizes)
        << "\n";
  return out.str();
}

std::string int64Array(const Shape &values) {
  std::string text = "{";
  for (size_t i = 0; i < values.size(); ++i)
    text += (i ? ", " : "") + std::to_string(values[i]) + "LL";
  return text + (values.empty() ? "0}" : "}");
}

void writeFile(const fs::path &path, const void *data, size_t bytes) {
  std::ofstream file(path, std::ios::binary);
  file.write(static_cast<const char *>(data),
             static_cast<std::streamsize>(bytes));
  if (!file)
    throw Error("export: cannot write " + path.string());
}

void writeText(const fs::path &path, const std::string &text) {
  writeFile(path, text.data(), text.size());
}

// A temporary directory, removed with everything in it unless kept.
struct TemporaryDirectory {
  fs::path path;
  explicit TemporaryDirectory(const fs::path &parent) {
    std::string pattern = (parent / ".kiln-export-XXXXXX").string();
    if (!mkdtemp(pattern.data()))
      throw Error("export: cannot create a directory in " + parent.string());
    path = pattern;
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

} // namespace

ExportResult exportGraph(std::shared_ptr<Graph> graph,
                         const ExportOptions &options) {
  auto start = std::chrono::steady_clock::now();
  const std::string &name = options.name;
  if (!isIdentifier(name))
    throw Error("export: the name '" + name +
                "' is not a C identifier (letters, digits and _, not "
                "starting with a digit)");
  if (options.inputs.size() != graph->inputs().size())
    throw Error("export: " + std::to_string(options.inputs.size()) +
                " input roles for a graph of " +
                std::to_string(graph->inputs().size()) + " inputs");
  if (options.outputNames.size() != graph->outputs().size())
    throw Error("export: " + std::to_string(options.outputNames.size()) +
                " output names for a graph of " +
                std::to_string(graph->outputs().size()) + " outputs");

  Target target;
  target.standalone = true;
  loop::Program program = planProgram(graph, target);
  for (const loop::Step &step : program.steps) {
    if (step.kind != loop::Step::Kind::Extern)
      continue;
    const Node &node = *step.node;
    std::string where = node.origin().empty() ? "" : " (" + node.origin() + ")";
    throw Unsupported("export: " + node.schema()->qualifiedName() + where +
                      " has no native lowering in kiln, so the exported "
                      "program would need torch to run it; nothing was "
                      "written");
  }
  for (const loop::ProgramOutput &output : program.outputs)
    if (output.buffer < 0)
      throw Unsupported("export: the function returns a value that is not a "
                        "tensor (" +
                        output.constant.str() +
                        "); exported programs return tensors only");

  AotTarget aot = makeTarget(options.cpu);
  CpuSchedule schedule = scheduleForCpu(program, aot.host);
  if (logEnabled("schedule"))
    logArtifact("schedule", scheduleSummary(program) + schedule.str());

  // The API's inputs, the weights and every buffer's place at run time.
  std::vector<ApiTensor> apiInputs, apiOutputs;
  std::vector<WeightEntry> weights;
  std::vector<int64_t> weightOfGraphInput(graph->inputs().size(), -1);
  std::vector<int64_t> apiOfGraphInput(graph->inputs().size(), -1);
  size_t apiCount = 0;
  for (const ExportedInput &input : options.inputs)
    if (!input.isWeight)
      apiCount = std::max<size_t>(apiCount, input.apiIndex + 1);
  apiInputs.resize(apiCount);
  for (size_t g = 0; g < options.inputs.size(); ++g) {
    const ExportedInput &input = options.inputs[g];
    const TensorMeta &meta = graph->inputs()[g]->meta();
    if (input.isWeight) {
      weightOfGraphInput[g] = static_cast<int64_t>(weights.size());
      weights.push_back({input.name, input.data, spanBytes(meta)});
      if (!input.data && spanBytes(meta) > 0)
        throw Error("export: weight " + input.name + " has no data");
      continue;
    }
    if (input.apiIndex < 0 || input.apiIndex >= static_cast<int64_t>(apiCount))
      throw Error("export: C API input position " +
                  std::to_string(input.apiIndex) + " is not below " +
                  std::to_string(apiCount));
    apiOfGraphInput[g] = input.apiIndex;
    ApiTensor &api = apiInputs[input.apiIndex];
    // One tensor the function reads through several names is one input.
    if (api.buffer >= 0 && !(api.meta == meta))
      throw Error("export: C API input " + input.name +
                  " is read with two layouts");
    if (api.buffer < 0)
      api = {input.name, meta, static_cast<int64_t>(g)};
  }
  std::ostringstream tables;
  for (size_t i = 0; i < apiInputs.size(); ++i)
    if (apiInputs[i].buffer < 0)
      throw Error("export: no graph input is C API input " + std::to_string(i));
  tables << "static const kiln_buffer_desc BUFFERS[] = {\n";
  std::vector<int64_t> views;
  // The weights: their contents are fixed for the artifact's life, so the
  // GEMMs that read them pack them once, when a model is created.
  std::unordered_set<int64_t> weightBuffers;
  for (size_t b = 0; b < program.buffers.size(); ++b) {
    const Buffer &buffer = program.buffers[b];
    int kind = kOwned;
    int64_t index = -1, offset = 0, bytes = 0;
    switch (buffer.kind) {
    case BufferKind::Input:
      if (weightOfGraphInput[buffer.graphInput] >= 0) {
        kind = kWeight;
        index = weightOfGraphInput[buffer.graphInput];
      } else {
        kind = kInput;
        index = apiOfGraphInput[buffer.graphInput];
      }
      break;
    case BufferKind::Constant:
      kind = kWeight;
      index = static_cast<int64_t>(weights.size());
      weights.push_back(
          {buffer.name.empty() ? "constant" + std::to_string(b) : buffer.name,
           buffer.constant->bytes.data(),
           static_cast<int64_t>(buffer.constant->bytes.size())});
      break;
    case BufferKind::Temporary:
      kind = kWorkspace;
      offset = buffer.workspaceOffset;
      break;
    case BufferKind::Tensor:
      kind = kOwned;
      bytes = bufferBytes(buffer);
      break;
    case BufferKind::View:
      kind = kView;
      index = buffer.base;
      offset = buffer.meta.storageOffset * itemSize(buffer.dtype());
      views.push_back(static_cast<int64_t>(b));
      break;
    }
    if (kind == kWeight)
      weightBuffers.insert(static_cast<int64_t>(b));
    tables << "  {" << kind << ", " << index << ", " << offset << "LL, "
           << bytes << "LL}, /* " << buffer.name << " */\n";
  }
  tables << "  {0, 0, 0, 0}};\n";
  // Views after the views they are views of.
  std::vector<int64_t> viewOrder;
  std::vector<bool> placed(program.buffers.size(), true);
  for (int64_t view : views)
    placed[view] = false;
  while (viewOrder.size() < views.size()) {
    size_t before = viewOrder.size();
    for (int64_t view : views)
      if (!placed[view] && placed[program.buffers[view].base]) {
        placed[view] = true;
        viewOrder.push_back(view);
      }
    if (viewOrder.size() == before)
      throw Error("export: the program's views form a cycle");
  }
  tables << "static const int32_t VIEW_ORDER[] = " << int64Array(viewOrder)
         << ";\n";

  // The kernels: one module, compiled for the chosen CPU.
  llvm::LLVMContext context;
  llvm::Module module("kiln_" + name, context);
  module.setTargetTriple(aot.machine->getTargetTriple().str());
  module.setDataLayout(aot.machine->createDataLayout());
  const MathLibrary &math = MathLibrary::cLibraryOnly();
  std::ostringstream steps, slots, declarations;
  int64_t slotCount = 0, maxSlots = 0, kernelCount = 0;
  steps << "static const kiln_step_desc STEPS[] = {\n";
  for (size_t s = 0; s < program.steps.size(); ++s) {
    const loop::Kernel &kernel = program.steps[s].kernel;
    std::string function = "kiln_" + name + "_k" + std::to_string(s);
    // About four GEMM tiles per thread of a 16-core machine (the threads
    // that will run it are not known).
    EmittedKernel emitted =
        emitCpuStep(module, program, kernel, schedule.kernel(s), function,
                    aot.host, math, 64, 0, &weightBuffers);
    emitted.function->setVisibility(llvm::GlobalValue::HiddenVisibility);
    declarations << "void " << function
                 << "(char *const *, int64_t, int64_t);\n";
    std::string packB = "0";
    if (emitted.packB) {
      emitted.packB->setVisibility(llvm::GlobalValue::HiddenVisibility);
      packB = emitted.packB->getName().str();
      declarations << "void " << packB
                   << "(char *const *, int64_t, int64_t);\n";
    }
    steps << "  {" << function << ", " << packB << ", " << slotCount << ", "
          << emitted.buffers.size() << ", "
          << constantSize(emitted.parallelRange, "a parallel range") << "LL, "
          << emitted.packRange << "LL, " << emitted.packedBBytes << "LL, "
          << emitted.alignment << "LL, "
          << constantSize(emitted.work, "a kernel's work") << "LL, "
          << (emitted.equalUnits ? 1 : 0) << "}, /* " << kernel.name << " */\n";
    static_assert(kPackedBSlot == -2, "AotRuntime.c's PACKED_B_SLOT");
    for (int64_t buffer : emitted.buffers)
      slots << buffer << ", ";
    slotCount += static_cast<int64_t>(emitted.buffers.size());
    maxSlots = std::max<int64_t>(maxSlots, emitted.buffers.size());
    ++kernelCount;
  }
  steps << "  {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}};\n";

  for (size_t o = 0; o < program.outputs.size(); ++o) {
    int64_t buffer = program.outputs[o].buffer;
    apiOutputs.push_back(
        {options.outputNames[o], program.buffers[buffer].meta, buffer});
  }
  auto describeTensors = [&](const char *array,
                             const std::vector<ApiTensor> &tensors) {
    for (size_t i = 0; i < tensors.size(); ++i)
      tables << "static const int64_t " << array << "_SIZES_" << i
             << "[] = " << int64Array(tensors[i].meta.sizes)
             << ";\nstatic const int64_t " << array << "_STRIDES_" << i
             << "[] = " << int64Array(tensors[i].meta.strides) << ";\n";
    tables << "static const kiln_tensor_desc " << array << "[] = {\n";
    for (size_t i = 0; i < tensors.size(); ++i)
      tables << "  {" << cString(tensors[i].name) << ", "
             << static_cast<int>(tensors[i].meta.dtype) << ", "
             << tensors[i].meta.sizes.size() << ", " << array << "_SIZES_" << i
             << ", " << array << "_STRIDES_" << i << ", " << tensors[i].buffer
             << "},\n";
    tables << "  {0, 0, 0, 0, 0, 0}};\n";
  };
  describeTensors("INPUTS", apiInputs);
  describeTensors("OUTPUTS", apiOutputs);
  // Ids that an input holds, checked by run before any step (an
  // embedding's rows): the view of the input each check reads.
  int64_t checkCount = 0;
  size_t checkRank = 1;
  std::ostringstream checks;
  for (const loop::IndexCheck &check : program.indexChecks) {
    const loop::Buffer &buffer = program.buffers[check.buffer];
    if (buffer.kind != loop::BufferKind::Input || buffer.graphInput < 0 ||
        apiOfGraphInput[buffer.graphInput] < 0)
      continue; // a weight's ids: fixed, clamped by the kernel
    const TensorMeta &elements = check.elements;
    tables << "static const int64_t CHECK_SIZES_" << checkCount
           << "[] = " << int64Array(elements.sizes)
           << ";\nstatic const int64_t CHECK_STRIDES_" << checkCount
           << "[] = " << int64Array(elements.strides) << ";\n";
    checks << "  {" << apiOfGraphInput[buffer.graphInput] << ", "
           << static_cast<int>(elements.dtype) << ", " << check.size << "LL, "
           << elements.sizes.size() << ", CHECK_SIZES_" << checkCount
           << ", CHECK_STRIDES_" << checkCount << ", " << elements.storageOffset
           << "LL, " << (check.fromEnd ? 1 : 0) << ", "
           << static_cast<int>(check.report) << ", " << check.dim << "LL, "
           << (check.ignored ? 1 : 0) << ", " << check.ignored.value_or(0)
           << "LL},\n";
    checkRank = std::max(checkRank, elements.sizes.size());
    ++checkCount;
  }
  tables << "static const kiln_index_check INDEX_CHECKS[] = {\n"
         << checks.str() << "  {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}};\n";
  tables << "static const kiln_weight_desc WEIGHTS[] = {\n";
  for (const WeightEntry &weight : weights)
    tables << "  {" << cString(weight.name) << ", " << weight.bytes << "LL},\n";
  tables << "  {0, 0}};\n";
  tables << declarations.str() << steps.str()
         << "static const int32_t STEP_SLOTS[] = {" << slots.str() << "0};\n";

  std::string tableText = tables.str();
  uint64_t fingerprint = weightsChecksum(
      reinterpret_cast<const uint8_t *>(tableText.data()), tableText.size());
  fingerprint ^= weightsChecksum(reinterpret_cast<const uint8_t *>(name.data()),
                                 name.size());
  std::vector<uint8_t> image = weightsImage(weights, fingerprint);

  std::string prefix = "kiln_" + name;
  std::ostringstream defines;
  defines << "/* The runtime of the kiln export '" << name
          << "', generated by kiln. */\n"
          << "#define KILN_HEADER \"" << name << ".h\"\n"
          << "#define KILN_API(function) " << prefix << "_##function\n"
          << "#define KILN_HANDLE " << prefix << "\n"
          << "#define MODEL_NAME " << cString(prefix) << "\n"
          << "#define MODEL_FINGERPRINT 0x" << std::hex << fingerprint
          << std::dec << "ull\n"
          << "#define BUFFER_COUNT " << program.buffers.size() << "\n"
          << "#define VIEW_COUNT " << viewOrder.size() << "\n"
          << "#define STEP_COUNT " << kernelCount << "\n"
          << "#define INPUT_COUNT " << apiInputs.size() << "\n"
          << "#define OUTPUT_COUNT " << apiOutputs.size() << "\n"
          << "#define INDEX_CHECK_COUNT " << checkCount << "\n"
          << "#define INDEX_CHECK_RANK " << checkRank << "\n"
          << "#define WEIGHT_COUNT " << weights.size() << "\n"
          << "#define MAX_SLOTS " << maxSlots << "\n"
          << "#define WORKSPACE_BYTES " << program.workspaceBytes << "LL\n"
          << "#define EMBEDDED_WEIGHTS " << (options.embedWeights ? 1 : 0)
          << "\n";
  std::string runtime = kAotRuntimeSource;
  const std::string marker = "/* KILN_TABLES */";
  size_t at = runtime.find(marker);
  std::string embeddedAccess =
      options.embedWeights
          ? "extern const unsigned char " + prefix +
                "_weights_image[];\nextern const uint64_t " + prefix +
                "_weights_size;\nstatic const unsigned char "
                "*embedded_weights_image(void) { return " +
                prefix +
                "_weights_image; }\nstatic uint64_t "
                "embedded_weights_size(void) { return " +
                prefix + "_weights_size; }\n"
          : "static const unsigned char *embedded_weights_image(void) { "
            "return 0; }\nstatic uint64_t embedded_weights_size(void) { "
            "return 0; }\n";
  runtime.replace(at, marker.size(), tableText + embeddedAccess);
  std::string source = defines.str() + runtime;

  if (options.embedWeights) {
    auto *bytes = llvm::ConstantDataArray::getRaw(
        llvm::StringRef(reinterpret_cast<const char *>(image.data()),
                        image.size()),
        image.size(), llvm::Type::getInt8Ty(context));
    auto *blob = new llvm::GlobalVariable(module, bytes->getType(), true,
                                          llvm::GlobalValue::ExternalLinkage,
                                          bytes, prefix + "_weights_image");
    blob->setAlignment(llvm::Align(64));
    blob->setVisibility(llvm::GlobalValue::HiddenVisibility);
    auto *size = new llvm::GlobalVariable(
        module, llvm::Type::getInt64Ty(context), true,
        llvm::GlobalValue::ExternalLinkage,
        llvm::ConstantInt::get(llvm::Type::getInt64Ty(context), image.size()),
        prefix + "_weights_size");
    size->setVisibility(llvm::GlobalValue::HiddenVisibility);
  }

  std::string problems;
  llvm::raw_string_ostream problemStream(problems);
  if (llvm::verifyModule(module, &problemStream))
    throw Error("export: the CPU code generator made invalid LLVM IR: " +
                problems);
  optimiseCpuModule(module, *aot.machine);
  llvm::SmallVector<char, 0> object;
  {
    llvm::raw_svector_ostream stream(object);
    llvm::legacy::PassManager passes;
    if (aot.machine->addPassesToEmitFile(passes, stream, nullptr,
                                         llvm::CodeGenFileType::ObjectFile))
      throw Error("export: LLVM cannot emit object files for this target");
    passes.run(module);
  }

  // Everything is built in a temporary directory and moved into place at
  // the end: a failed export leaves nothing behind.
  fs::path directory(options.directory);
  std::error_code error;
  fs::create_directories(directory, error);
  if (error)
    throw Error("export: cannot create " + directory.string() + ": " +
                error.message());
  TemporaryDirectory work(directory);
  const fs::path &tmp = work.path;
  std::string header =
      headerText(name, apiInputs, apiOutputs, aot.host.cpuName);
  writeText(tmp / (name + ".h"), header);
  writeText(tmp / "runtime.c", source);
  writeFile(tmp / "kernels.o", object.data(), object.size());
  writeFile(tmp / (name + ".weights"), image.data(), image.size());
  writeText(tmp / "main.c", mainText(name));
  writeText(tmp / "README.md",
            readmeText(name, apiInputs, apiOutputs, aot.host.cpuName,
                       options.embedWeights));
  std::string cc = compilerCommand(options);
  auto path = [&](const std::string &file) {
    return shellQuote((tmp / file).string());
  };
  runCommand(cc + " -std=c11 -O2 -fPIC -fvisibility=hidden -w -c " +
                 path("runtime.c") + " -o " + path("runtime.o"),
             "compiling the C runtime with " + cc);
  runCommand(cc + " -r -nostdlib " + path("runtime.o") + " " +
                 path("kernels.o") + " -o " + path(name + ".o"),
             "linking the object file with " + cc);
  runCommand(cc + " -shared " + path(name + ".o") + " -o " +
                 path(name + ".so") + " -lm -lpthread",
             "linking the shared library with " + cc);

  ExportResult result;
  for (const std::string &file :
       {name + ".o", name + ".so", name + ".h", name + ".weights",
        std::string("main.c"), std::string("README.md")}) {
    fs::rename(tmp / file, directory / file, error);
    if (error)
      throw Error("export: cannot move " + file + " into " +
                  directory.string() + ": " + error.message());
    result.files.push_back((directory / file).string());
  }
  result.kernelCount = kernelCount;
  result.milliseconds = std::chrono::duration<double, std::milli>(
                            std::chrono::steady_clock::now() - start)
                            .count();
  return result;
}

} // namespace kiln::backend
