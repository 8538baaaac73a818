#!/usr/bin/env bash
# Runs every kiln test: sets up and builds (idempotent), then the C++ tests
# (ctest), the C++ tests again under AddressSanitizer, and the Python tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

scripts/setup.sh --no-demo

echo "== C++ tests"
ctest --test-dir build --output-on-failure -j2

echo "== C++ tests under AddressSanitizer"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKILN_ASAN=ON \
      -DKILN_BUILD_PYTHON=OFF > /dev/null
cmake --build build-asan --target kiln_tests
ASAN_OPTIONS=detect_leaks=1 build-asan/kiln_tests --gtest_brief=1

echo "== Python tests"
cd tests/py
"$PYTHON" -m pytest -q -p no:cacheprovider "$@"
