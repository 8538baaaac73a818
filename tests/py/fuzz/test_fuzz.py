# The differential fuzzer in CI: a fixed set of seeds, every op family and
# dtype, compiled programs against eager on the same inputs (values, NaN
# positions, infinities, dtypes, shapes, strides, aliasing). A failure prints
# the shrunk reproducer. `make fuzz` runs it as long as asked.
import pytest
import torch

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


def _off_by_much(fn):
    """A 'compiler' whose every output is wrong wherever it can be."""
    def wrong(output):
        if output.dtype == torch.bool:
            return ~output
        if output.dtype.is_floating_point:
            return output * 1.5 + 1
        return output + 1

    def run(*args):
        return tuple(wrong(output) for output in fn(*args))
    return run


def test_the_checker_reports_wrong_answers_despite_its_references():
    # The float64 and correctly-rounded references excuse kiln only where
    # eager is off: outputs that are wrong everywhere must be reported.
    reported = 0
    for seed in range(60):
        program = generate(seed)
        outputs = program.function()(*program.make_inputs())
        if not any(o.numel() and (not o.dtype.is_floating_point or o.isfinite().any())
                   for o in outputs):
            continue  # nothing a wrong answer could change
        failure = check(program, _off_by_much)
        assert failure, f"seed {seed}: a wrong answer passed"
        assert "raised" not in failure, failure
        reported += 1
    assert reported >= 40
