# kiln's benchmark suite: eager vs torch.compile (Inductor) vs kiln.
# Run it with `make bench` (or `python -m bench.runner --help`); see bench/README.md.
