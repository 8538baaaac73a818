// Detects the host CPU's vector width, unroll and last-level cache for the
// CPU code generator. Depends on backend/cpu/HostTarget.h, LLVM's host queries
// and IR functions.
#include "backend/cpu/HostTarget.h"

#include <llvm/ADT/StringMap.h>
#include <llvm/IR/Function.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/Triple.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <vector>

namespace kiln::backend {
namespace {

// The size of the largest cache Linux describes for cpu0 (its L3 on x86),
// or 0 where it describes none.
int64_t lastLevelCacheBytes() {
  int64_t largest = 0;
  for (int index = 0; index < 8; ++index) {
    std::ifstream file("/sys/devices/system/cpu/cpu0/cache/index" +
                       std::to_string(index) + "/size");
    int64_t size = 0;
    std::string unit;
    if (!(file >> size))
      continue;
    file >> unit;
    if (unit == "K")
      size <<= 10;
    else if (unit == "M")
      size <<= 20;
    largest = std::max(largest, size);
  }
  return largest;
}

HostTarget detectHostTarget() {
  HostTarget host;
  host.cpuName = llvm::sys::getHostCPUName().str();
  llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
  std::vector<std::string> sorted;
  for (const auto &feature : features)
    sorted.push_back((feature.getValue() ? "+" : "-") + feature.getKey().str());
  std::sort(sorted.begin(), sorted.end());
  for (const std::string &feature : sorted)
    host.features += (host.features.empty() ? "" : ",") + feature;
  auto has = [&](const char *name) {
    auto found = features.find(name);
    return found != features.end() && found->getValue();
  };
  host.vectorBits = has("avx512f") ? 512 : has("avx2") ? 256 : 128;
  // KILN_CPU_VECTOR_BITS=128|256 narrows the vectors (to compare widths, or
  // to avoid AVX-512's clock penalty); it never widens them.
  if (const char *text = std::getenv("KILN_CPU_VECTOR_BITS")) {
    int bits = std::atoi(text);
    if (bits == 128 || bits == 256 || bits == 512)
      host.vectorBits = std::min(host.vectorBits, bits);
  }
  // Vectors per step of a vector loop: four (independent accumulators of a
  // reduction, loads in flight), unless KILN_CPU_UNROLL=1..8 says otherwise.
  // On the 16-core Xeon (AVX-512) four 512-bit vectors against two: a
  // single-threaded column sum 8192x1024 took 1180 against 2519 us (eager
  // 1690), softmax and layer_norm at 16 threads 8-12% less.
  host.unroll = 4;
  if (const char *text = std::getenv("KILN_CPU_UNROLL")) {
    int unroll = std::atoi(text);
    if (unroll >= 1 && unroll <= 8)
      host.unroll = unroll;
  }
  // Kernels writing at least half the last-level cache stream their output
  // past the caches: on the 2-core EPYC (32 MiB L3) 16 MiB outputs ran 10%
  // faster streamed, smaller ones faster cached; on the 16-core Xeon (300 MiB
  // L3 as its VM reports it) 16 MiB ones ran 10-30% faster cached.
  // KILN_CPU_STREAMING_BYTES sets the size, 0 turns it off.
  if (llvm::Triple(llvm::sys::getProcessTriple()).isX86()) {
    int64_t cache = lastLevelCacheBytes();
    host.streamingBytes = cache > 0 ? cache / 2 : int64_t(16) << 20;
    if (const char *text = std::getenv("KILN_CPU_STREAMING_BYTES"))
      host.streamingBytes = std::max<int64_t>(0, std::atoll(text));
    // A page ahead: the hardware's stream prefetchers stop at the end of
    // each 4 KiB page and learn the next one from its first misses. Of 4, 8
    // and 16 KiB, 4 was best or within noise of it in every kernel measured
    // (CpuSchedule's planPrefetch has the numbers).
    // KILN_CPU_PREFETCH_BYTES sets the distance, 0 turns it off.
    host.prefetchBytes = 4096;
    if (const char *text = std::getenv("KILN_CPU_PREFETCH_BYTES"))
      host.prefetchBytes = std::max<int64_t>(0, std::atoll(text));
  }
  return host;
}

} // namespace

const HostTarget &hostTarget() {
  static const HostTarget host = detectHostTarget();
  return host;
}

void setTargetAttributes(llvm::Function &function, const HostTarget &host) {
  function.addFnAttr("target-cpu", host.cpuName);
  function.addFnAttr("target-features", host.features);
  bool avx512 = host.features.find("+avx512f") != std::string::npos;
  if (avx512 && host.vectorBits < 512) {
    // X86 makes 512-bit registers legal unless the function prefers
    // narrower vectors and requires none wider.
    function.addFnAttr("prefer-vector-width", std::to_string(host.vectorBits));
    function.addFnAttr("min-legal-vector-width", "0");
  }
}

} // namespace kiln::backend
