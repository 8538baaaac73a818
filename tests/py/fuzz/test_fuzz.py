# The differential fuzzer in CI: a fixed set of seeds, every op family and
# dtype, compiled programs against eager on the same inputs (values, NaN
# positions, infinities, dtypes, shapes, strides, aliasing). A failure prints
# the shrunk reproducer. `make fuzz` runs it as long as asked.
import pytest

import kiln
from fuzz.program_generator import check, generate, reproducer, shrink

SEEDS = range(0, 3000)


@pytest.mark.parametrize("block", range(0, len(SEEDS), 250))
def test_fuzzed_programs_match_eager(block):
    failures = []
    for seed in SEEDS[block:block + 250]:
        program = generate(seed)
        failure = check(program, kiln.compile)
        if failure:
            small, small_failure = shrink(program, kiln.compile)
            failures.append(reproducer(small, small_failure or failure))
    assert not failures, "\n\n".join(failures)
