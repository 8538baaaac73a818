#!/usr/bin/env bash
# Sets up a fresh Debian machine for kiln and builds it: Debian packages
# (LLVM 19, GoogleTest, SLEEF), Python packages (torch 2.13.0 CPU and the
# test tools), the native build, and an editable install of the package.
# Idempotent: a second run only rebuilds what changed.
#   scripts/setup.sh            set up, build, then run the demo
#   scripts/setup.sh --no-demo  set up and build only (used by scripts/test.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

run_demo=1
for arg in "$@"; do
  case "$arg" in
    --no-demo) run_demo=0 ;;
    *) echo "setup.sh: unknown option '$arg' (known: --no-demo)" >&2; exit 2 ;;
  esac
done

PYTHON=${PYTHON:-python3}
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# Debian packages.
apt_packages=(llvm-19-dev clang-19 libclang-19-dev libsleef-dev
              libgtest-dev ccache cmake ninja-build g++ git)
missing=()
for package in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" ||
    missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

# CPython's headers for the interpreter in use (a pyenv or Debian python).
if ! "$PYTHON" -c 'import sysconfig,os,sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
  version=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "python${version}-dev"
fi

# Python packages. torch is pinned: an unpinned install pulls a CUDA build.
pip_install() { "$PYTHON" -m pip install --quiet --disable-pip-version-check "$@"; }
if ! "$PYTHON" -c 'import torch, sys; sys.exit(torch.__version__.split("+")[0] != "2.13.0")' 2>/dev/null; then
  echo "setup: installing torch==2.13.0"
  pip_install torch==2.13.0
fi
# transformers: the frontend tests capture its models (code nobody here wrote).
python_packages=(numpy pytest expecttest hypothesis pybind11 setuptools wheel transformers==5.23.0)
if ! "$PYTHON" -c 'import numpy, pytest, expecttest, hypothesis, pybind11, setuptools, wheel, transformers, sys; sys.exit(transformers.__version__ != "5.23.0")' 2>/dev/null; then
  echo "setup: installing Python packages: ${python_packages[*]}"
  pip_install "${python_packages[@]}"
fi

# The native build: core library, the kiln._C extension, the C++ tests.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DPython3_EXECUTABLE="$(command -v "$PYTHON")" > build.log.tmp 2>&1 ||
  { cat build.log.tmp; rm -f build.log.tmp; exit 1; }
rm -f build.log.tmp
cmake --build build

# `import kiln` from anywhere, and the torch.compile backend entry point.
if ! "$PYTHON" -m pip show kiln >/dev/null 2>&1 ||
   [ "$("$PYTHON" -c 'import kiln,os;print(os.path.realpath(os.path.dirname(kiln.__file__)))' 2>/dev/null)" != "$(realpath python/kiln)" ]; then
  echo "setup: installing the kiln package (editable)"
  pip_install --no-build-isolation --no-deps -e .
fi

if [ "$run_demo" -eq 1 ]; then
  "$PYTHON" examples/demo.py
fi
