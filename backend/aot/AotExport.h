// Ahead-of-time export: a graph compiled for a CPU into an object file, a
// shared library and a C header that run it with no Python, no torch and no
// LLVM (libc, libm and libpthread only), plus its weights file, an example
// driver and a README. Depends on ir/Graph.h.
#pragma once

#include "ir/Graph.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::backend {

/// What one graph input is in the exported program: an input the caller
/// passes through the C API on every run, or a weight stored with the
/// program (parameters, buffers, tensors the function reads from outside).
struct ExportedInput {
  std::string name; // a C API input's or a weight's name
  bool isWeight = false;
  /// C API inputs: the position in the C API's inputs (each position given
  /// once, all from 0 up).
  int64_t apiIndex = -1;
  /// Weights: the address of the element at offset 0 of the graph input's
  /// layout (its sizes and strides say which bytes from there it spans).
  const uint8_t *data = nullptr;
};

struct ExportOptions {
  std::string name;      // a C identifier: kiln_<name>_create, <name>.so
  std::string directory; // created if missing
  /// LLVM's CPU name ("x86-64-v3", "skylake-avx512", ...); empty: the host,
  /// with all its features.
  std::string cpu;
  /// The weights inside the object file as well (create(NULL, ...) uses
  /// them); a weights file is written either way.
  bool embedWeights = false;
  /// The C compiler that compiles the C runtime and links the shared library
  /// (empty: $CC, else cc).
  std::string compiler;
  /// Per graph input, in order.
  std::vector<ExportedInput> inputs;
  /// Per graph output: its name in the C API.
  std::vector<std::string> outputNames;
};

struct ExportResult {
  std::vector<std::string> files; // paths written
  int64_t kernelCount = 0;
  double milliseconds = 0;
};

/// Compiles `graph` for the CPU with every op native and writes the
/// artifact into options.directory: <name>.o, <name>.so, <name>.h,
/// <name>.weights, main.c and README.md. Throws kiln::Unsupported when the
/// graph cannot run without torch (naming the op and its source line) and
/// kiln::Error for bad options or a failed build; nothing is written then.
ExportResult exportGraph(std::shared_ptr<Graph> graph,
                         const ExportOptions &options);

/// The checksum of weights files (FNV-1a over little-endian 64-bit words,
/// then the tail bytes), as the exported runtime computes it.
uint64_t weightsChecksum(const uint8_t *bytes, uint64_t count);

} // namespace kiln::backend
