#!/usr/bin/env bash
# Packs what building kiln needs from LLVM 19 (headers, libLLVM and the
# libraries it links) and SLEEF's vector math library into
# .bundle/llvm-19.tar.xz, for a machine without
# LLVM: the GPU machine, where scripts/device_build.sh unpacks and builds.
# Idempotent: the bundle is rebuilt only when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.bundle/llvm-19.tar.xz
[ -f "$out" ] && { echo "bundle: $out exists"; exit 0; }
mkdir -p .bundle
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/llvm/lib"
cp -rL /usr/lib/llvm-19/include "$stage/llvm/"
cp -L /usr/lib/llvm-19/lib/libLLVM-19.so "$stage/llvm/lib/libLLVM.so.19.1"
# libLLVM's own dependencies that a CUDA image may lack.
for library in $(ldd /usr/lib/llvm-19/lib/libLLVM-19.so | awk '/=>/ {print $3}'); do
  case "$(basename "$library")" in
    libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*) ;;
    *) cp -L "$library" "$stage/llvm/lib/" ;;
  esac
done
# kiln's CPU kernels load SLEEF at run time; found through the rpath.
cp -L /usr/lib/x86_64-linux-gnu/libsleef.so.3 "$stage/llvm/lib/"
tar -C "$stage" -cf - llvm | xz -T0 -6 > "$out"
ls -la "$out"
