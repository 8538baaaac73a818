# Benchmarks: `make bench` runs the suite on the CPU, `make bench-cuda` on an NVIDIA
# GPU (it skips with a message where there is none). Both install bench/requirements.txt
# first (idempotent) and write dated results under bench/results/. See bench/README.md.
# `make fuzz` runs the differential fuzzer (tests/py/fuzz) for FUZZ_SECONDS (default 60)
# or FUZZ_COUNT programs from FUZZ_SEED, and prints a shrunk reproducer of each failure.
# `make bench-frontend` times kiln's frontend (per-call overhead on a cache hit, capture
# time) against eager and TorchDynamo on the CPU in about 2 minutes; options in FRONTEND_ARGS.
# `make bench-compile` times kiln's and Inductor's cold first call (compile included), each in a
# fresh process, on straight-line graphs up to 8000 ops and GPT-2 small; options in COMPILE_ARGS.
# `make bench-export` times kiln's GEMM against torch's and the hand-written GPT exported and run
# from C against eager, Inductor and kiln's JIT (options in EXPORT_ARGS, e.g. --threads 16).
# `make bench-generation` generates with a growing sequence and sweeps a transformer block over
# 32 sequence lengths (dynamic shapes); `make bench-dynamic` times the kernel workloads compiled
# once for every size against the same compiled for their sizes (options in DYNAMIC_ARGS).
PYTHON ?= python3
BENCH_ARGS ?=

.PHONY: bench bench-cuda bench-quick bench-requirements bench-frontend bench-compile bench-export bench-generation bench-dynamic fuzz

# Installs the pinned versions only where the packages are missing, so a machine that
# has them (a GPU image without network) runs with its own; the report names the versions.
bench-requirements:
	@$(PYTHON) -c "import transformers, matplotlib" 2>/dev/null || \
	  $(PYTHON) -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -r bench/requirements.txt

bench: bench-requirements
	$(PYTHON) -m bench.runner --device cpu $(BENCH_ARGS)

bench-cuda: bench-requirements
	$(PYTHON) -m bench.runner --device cuda $(BENCH_ARGS)

bench-quick: bench-requirements
	$(PYTHON) -m bench.runner --device cpu --quick --out /tmp/kiln-bench-quick $(BENCH_ARGS)

bench-export: bench-requirements
	$(PYTHON) -m bench.export $(EXPORT_ARGS)

bench-generation: bench-requirements
	$(PYTHON) -m bench.generation $(GENERATION_ARGS)

bench-dynamic: bench-requirements
	$(PYTHON) -m bench.dynamic $(DYNAMIC_ARGS)

bench-frontend:
	$(PYTHON) -m bench.frontend $(FRONTEND_ARGS)

bench-compile: bench-requirements
	$(PYTHON) -m bench.compile_time $(COMPILE_ARGS)

fuzz:
	$(PYTHON) tests/py/fuzz/run.py
