"""The extrapolator inside the real training loop: a resume across the jump reproduces the run.

Slow (three tiny runs plus an SFT warm start); the fast unit test
`test_extrap_policy.py::test_resume_across_the_jump_is_bitwise_identical` covers the same
state round trip without the loop.
"""

import pytest

from tests.conftest import read_metrics, run_tiny, strip_timing
from tests.faults import fail_overrides

pytestmark = pytest.mark.integration

# a setting where the tiny policy gets reward (so the LoRA moves) before the jump at step 4
LEARNS = ["task.num_terms=2", "task.max_operand=6", "task.n_train=60", "task.n_eval=12", "model.sft.steps=150",
          "rollout.prompts_per_step=8"]  # fmt: skip
NEXT = LEARNS + ["extrapolation=next", "extrapolation.interval=1", "extrapolation.horizon=2",
                 "extrapolation.extend_at=[4]", "extrapolation.hidden=16", "extrapolation.epochs=30",
                 "extrapolation.lr=1e-3", "train.steps=6"]  # fmt: skip


@pytest.mark.slow
def test_next_in_loop_resume_across_the_jump_equals_uninterrupted(tmp_path):
    # build the SFT base first: a run that builds it (cache miss) and one that loads it (hit)
    # start from different LoRA inits today, which would make the comparison meaningless
    run_tiny(tmp_path / "warm", LEARNS + ["train.steps=1"])
    run_tiny(tmp_path / "ref", NEXT)
    ref = read_metrics(tmp_path / "ref")
    assert any(r.get("actor/grad_norm", 0) > 0 for r in ref if 1 <= r["step"] <= 3)  # the adapter moved
    jump = next(r for r in ref if r["step"] == 4)
    assert jump["extrap/jumps"] == 1.0 and jump["extrap/steps_saved"] == 1.5 * 2
    assert jump["extrap/records"] == 5.0 and jump["extrap/predictor_pairs"] == 3.0
    assert jump["extrap/jump_sigma_mean"] > 0

    crashed = tmp_path / "crashed"
    with pytest.raises(RuntimeError, match="forced failure"):
        run_tiny(crashed, NEXT + fail_overrides(4))  # last checkpoint: step 2, before the jump
    run_tiny(crashed, NEXT)
    assert strip_timing(read_metrics(crashed)) == strip_timing(ref)
