#!/usr/bin/env bash
# On the GPU machine, after scripts/device_build.sh: the GPU reduction tests
# (block-per-point and column mappings, the warp ones beside them) against
# eager, then their timings against eager (bench/gpu_reductions.py). Writes
# pytest.txt, bench.md, bench.log and nvidia-smi.txt under $OUT (default
# /tmp/kiln-gpu-reductions). Exits non-zero when a test fails.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/kiln-gpu-reductions}
mkdir -p "$out"
export PYTHONPATH=$PWD/python:$PWD/.bundle/py
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || true

python3 -m pytest -q -p no:cacheprovider tests/py/backend/test_cuda_ops.py \
  -k "gpu_reduction or long_rows or many_short_rows or empty_and_zero or layouts_and_special" \
  2>&1 | tee "$out/pytest.txt"
tests=${PIPESTATUS[0]}

python3 bench/gpu_reductions.py --calls 200 --out "$out/bench.md" 2>&1 |
  tee "$out/bench.log"
bench=${PIPESTATUS[0]}

echo "device_gpu_reductions: pytest exit $tests, bench exit $bench; results in $out"
[ "$tests" -eq 0 ] && [ "$bench" -eq 0 ]
