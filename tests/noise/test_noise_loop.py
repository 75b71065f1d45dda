"""AQN inside the real training loop: it reaches the sampling policy, never evaluation (its resume: the AQN row
of tests/run/test_resume_matrix.py)."""

import pytest

from tests.conftest import read_metrics, run_tiny

pytestmark = pytest.mark.integration

EASY = ["task.num_terms=2", "task.max_operand=6", "task.n_train=60", "task.n_eval=12", "model.sft.steps=60",
        "train.steps=4", "train.eval_every=2", "train.ckpt_every=1", "quant=nvfp4"]
AQN = ["noise=aqn", "noise.stages=2", "noise.sigma_start=0.5", "noise.sigma_end=0.5"]  # stage 1 = steps 2..4


def test_noise_reaches_rollouts_but_not_evaluation(tmp_path):
    clean = read_metrics(run_tiny(tmp_path / "clean", EASY) and tmp_path / "clean")
    noisy = read_metrics(run_tiny(tmp_path / "noisy", EASY + AQN) and tmp_path / "noisy")
    assert [r["noise/sigma"] for r in noisy[1:]] == [0.0, 0.5, 0.5, 0.5]
    # stage 0 is noise-free: step 1 is identical; afterwards the sampling policy differs
    assert noisy[1]["actor/entropy"] == clean[1]["actor/entropy"]
    assert noisy[2]["actor/entropy"] != clean[2]["actor/entropy"]
    # evaluation never runs under noise: the step-0 evaluation is identical (same base, same LoRA init)
    assert noisy[0]["val/acc"] == clean[0]["val/acc"] and noisy[0]["val/mean_at_k"] == clean[0]["val/mean_at_k"]
