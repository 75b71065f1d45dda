"""End-to-end runs of the real loop at tiny size: determinism, failures (resume: tests/run/test_resume_matrix.py)."""

import json
import re
import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT, TINY, read_metrics, run_tiny, strip_timing
from tests.faults import fail_overrides

pytestmark = pytest.mark.integration

# fp32 on every CPU kind (trainer.dtype=auto picks bf16 on one with bf16 instructions): the sampling streams
# below were chosen in fp32 (in bf16, seed 0's 8 steps drew no rewarded sample)
EASY = ["task.num_terms=2", "task.max_operand=6", "task.n_train=60", "task.n_eval=12", "model.sft.steps=60",
        "trainer.dtype=fp32"]


def test_run_logs_metrics_and_checkpoints(tmp_path):
    s = run_tiny(tmp_path, EASY)
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    for key in ["train/reward/mean", "train/rewards/correct", "train/frac_reward_zero_std", "actor/pg_loss",
                "actor/entropy", "actor/clip_frac", "actor/grad_norm", "response_length/mean",
                "perf/tokens_per_s", "timing_s/gen", "timing_s/train"]:
        assert key in rows[1], key
    assert {"val/acc", "val/mean_at_k", "perf/compute/flops"} <= set(rows[2]) and "val/acc" in rows[0]
    assert rows[4]["perf/compute/flops"] > rows[2]["perf/compute/flops"] > 0
    assert s["status"] == "finished" and json.loads((tmp_path / "summary.json").read_text())["val/acc"] == s["val/acc"]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step_2", "step_4"]
    assert (tmp_path / "ckpt/step_4/adapter/adapter_config.json").is_file()  # PEFT format
    assert not [p for p in (tmp_path / "ckpt").iterdir() if p.name.startswith(".tmp")]


def test_same_seed_same_metrics_and_lora_learns(tmp_path):
    # 8 steps: at a ~4% pass rate, 4 steps of 4 x 4 samples have no rewarded sample (so no gradient) for
    # ~7% of sampling streams; 8 steps for ~0.5%
    run_tiny(tmp_path / "a", EASY + ["train.steps=8"])
    run_tiny(tmp_path / "b", EASY + ["train.steps=8"])
    a, b = strip_timing(read_metrics(tmp_path / "a")), strip_timing(read_metrics(tmp_path / "b"))
    assert a == b
    assert any(r.get("actor/grad_norm", 0) > 0 for r in a)  # the runs did learn something
    run_tiny(tmp_path / "c", EASY + ["train.steps=8", "seed=1"])
    assert strip_timing(read_metrics(tmp_path / "c")) != a


def test_non_finite_loss_refuses_step_and_keeps_checkpoint(tmp_path, monkeypatch):
    import rlx.algo.policy_update as U

    real = U.policy_loss
    calls = {"n": 0}

    def poisoned(*a, **k):
        loss, m = real(*a, **k)
        calls["n"] += 1
        return (loss * float("nan") if calls["n"] > 2 else loss), m  # steps 1-2 fine, step 3 NaN

    run_tiny(tmp_path, EASY + ["train.steps=3"])  # builds the cache
    import shutil

    shutil.rmtree(tmp_path)
    monkeypatch.setattr(U, "policy_loss", poisoned)
    from rlx.run.checkpoint import NonFiniteError

    with pytest.raises(NonFiniteError, match="step 3"):
        run_tiny(tmp_path, EASY + ["train.steps=4", "algo.micro_batch_size=64"])
    state = torch.load(tmp_path / "ckpt/step_2/trainer_state.pt", weights_only=False)
    assert state["step"] == 2 and not (tmp_path / "ckpt/step_3").exists()
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "failed"


def test_multirun_separate_dirs(tmp_path):
    cmd = [sys.executable, "-m", "rlx.train", "-m", "algo=grpo,dr_grpo", *TINY, *EASY, "train.steps=1",
           f"hydra.sweep.dir={tmp_path}"]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, timeout=600)
    runs = sorted(p.parent for p in tmp_path.rglob("metrics.jsonl"))
    assert len(runs) == 2 and runs[0] != runs[1]
    names = {json.loads((r / "summary.json").read_text())["status"] for r in runs}
    assert names == {"finished"}


def test_hf_model_from_local_path(tmp_path):
    """model=hf loads any local causal LM + tokenizer (here a tiny one the test saves)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rlx.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, pad_token_id=0, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    path = tmp_path / "model"
    Qwen2ForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    s = run_tiny(tmp_path / "run", EASY + ["model=hf", f"model.path={path}", "model.dtype=float32", "train.steps=2",
                                           "model.lora.r=4"])
    assert s["status"] == "finished"
    with pytest.raises(FileNotFoundError, match="config.json"):
        run_tiny(tmp_path / "run2", EASY + ["model=hf", f"model.path={tmp_path / 'nope'}"])


def test_wandb_offline_resume_keeps_run_id(tmp_path, monkeypatch):
    """logger.mode=offline: the run id is checkpointed and a resumed run continues the same wandb run."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    over = EASY + ["logger.mode=offline", "logger.project=rlx-test", "logger.tags=[t1]", "train.steps=3",
                   "train.ckpt_every=1"]
    with pytest.raises(RuntimeError, match="forced failure"):
        run_tiny(tmp_path, over + fail_overrides(3))
    failed = json.loads((tmp_path / "summary.json").read_text())
    assert failed["status"] == "failed" and failed["wandb_run_id"]
    s = run_tiny(tmp_path, over)
    assert s["wandb_run_id"] == failed["wandb_run_id"]
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    # wandb names a run's directory offline-run-<second>-<id>, with a -N suffix when a resume starts in the
    # same second as the first start (a warm wandb service makes that likely)
    assert runs and all(re.search(rf"-{failed['wandb_run_id']}(-\d+)?$", r.name) for r in runs)
    state = torch.load(tmp_path / "ckpt/step_3/trainer_state.pt", weights_only=False)
    assert state["wandb_run_id"] == failed["wandb_run_id"]


@pytest.mark.parametrize("override,key", [("train.eval_every=0", "train.eval_every"), ("train.ckpt_every=0", "train.ckpt_every"),
                                          ("train.steps=-1", "train.steps"), ("train.resume=maybe", "train.resume")])
def test_bad_train_settings_name_the_key(tmp_path, override, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        run_tiny(tmp_path, EASY + [override])
