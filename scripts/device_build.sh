#!/usr/bin/env bash
# On the GPU machine (no LLVM, no network): unpacks the LLVM bundle that
# scripts/device_bundle.sh made, builds kiln for the python3 there, and
# leaves `import kiln` working through PYTHONPATH=python.
set -euo pipefail
cd "$(dirname "$0")/.."
root=/tmp/kiln-llvm
if [ ! -d "$root/llvm" ]; then
  mkdir -p "$root"
  xz -dc .bundle/llvm-19.tar.xz | tar -C "$root" -xf -
fi
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DKILN_LLVM_ROOT="$root/llvm" -DKILN_BUILD_TESTS=OFF \
      -DPython3_EXECUTABLE="$(command -v python3)" > build-device.log 2>&1 ||
  { cat build-device.log; exit 1; }
cmake --build build-device -j "$(nproc)"
