# `make fuzz`: runs the differential fuzzer for FUZZ_SECONDS (or FUZZ_COUNT
# programs) from FUZZ_SEED, then prints the count, the seeds, and a shrunk
# reproducer of each distinct failure. Run from the repository root.
import collections
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import kiln  # noqa: E402
from fuzz.program_generator import check, generate, reproducer, shrink  # noqa: E402


def main():
    count = int(os.environ.get("FUZZ_COUNT", "0"))
    seconds = float(os.environ.get("FUZZ_SECONDS", "1e9" if count else "60"))
    seed = int(os.environ.get("FUZZ_SEED", "0"))
    start, ran = time.time(), 0
    by_kind = collections.OrderedDict()
    # FUZZ_SECONDS also bounds a FUZZ_COUNT run, so that it reports what it ran.
    while (not count or ran < count) and time.time() - start < seconds:
        program = generate(seed + ran)
        try:
            failure = check(program, kiln.compile)
        except Exception as error:  # noqa: BLE001 - a checker error is a finding too
            failure = f"checker error {type(error).__name__}: {error}"
        if failure:
            kind = failure.split(":")[0] + " | " + ",".join(sorted(program.families))
            by_kind.setdefault(kind, []).append(program)
        ran += 1
    failing = sum(len(programs) for programs in by_kind.values())
    print(f"fuzz: {ran} programs, seeds {seed}..{seed + ran - 1}, {failing} failing, "
          f"{len(by_kind)} distinct, {time.time() - start:.0f} s")
    for kind, programs in by_kind.items():
        small, failure = shrink(programs[0], kiln.compile)
        print(f"\n== {kind}: {len(programs)} program(s), seeds {[p.seed for p in programs][:10]}")
        print(reproducer(small, failure or "(did not reproduce when shrunk)"))
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
