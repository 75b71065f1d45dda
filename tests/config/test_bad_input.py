"""Every invalid value the trustworthy-runs issue lists fails before any model is built, naming the key."""

import pytest

from tests.conftest import TINY, compose

# (overrides, what the message must name)
BAD = [
    (["rollout.temperature=0"], "rollout.temperature"),
    (["rollout.temperature=-1"], "rollout.temperature"),
    (["algo.grad_clip=-1"], "algo.grad_clip"),
    (["rollout.group_size=1"], "rollout.group_size"),
    (["rollout.group_size=0"], "rollout.group_size"),
    (["rollout.prompts_per_step=0"], "rollout.prompts_per_step"),
    (["+algo.foo=1"], "algo.foo"),
    (["+rollout.vllm.bogus=2"], "rollout.vllm.bogus"),
    (["algo.lr=-1"], "algo.lr"),
    (["algo.weight_decay=-0.1"], "algo.weight_decay"),
    (["model.lora.r=0"], "model.lora.r"),
    (["model.lora.dropout=1.5"], "model.lora.dropout"),
    (["rollout.top_p=0"], "rollout.top_p"),
    (["rollout.max_new_tokens=0"], "rollout.max_new_tokens"),
    (["logger.mode=bogus"], "logger.mode"),
    (["extrapolation=next", "extrapolation.extend_at=[500]", "train.steps=4"], "extrapolation.extend_at"),
    (["task.n_eval=0"], "task.n_eval"),
    (["task.n_train=0"], "task.n_train"),
    (["noise=aqn", "noise.stages=0"], "noise"),
    (["task.reward_timeout_s=0"], "task.reward_timeout_s"),
    (["rollout.mode=later"], "rollout.mode"),
    # round three (issue 31): NaN and inf pass every `x < 0` check; each must be refused by name
    (["algo.lr=inf"], "algo.lr"),
    (["algo.eps_high=nan"], "algo.eps_high"),
    (["algo.beta=nan"], "algo.beta"),
    (["rollout.temperature=inf"], "rollout.temperature"),
    (["task.rewards={correct: nan}"], "task.rewards.correct"),
    (["task.rewards={correct: inf}"], "task.rewards.correct"),
    (["algo.lr=1e38"], "algo.lr"),  # finite, but it overflows in the optimizer
    # the tiny model's shape (TINY: hidden 32, 2 heads, 1 kv head)
    (["model.hidden_size=0"], "model.hidden_size"),
    (["model.num_layers=0"], "model.num_layers"),
    (["model.intermediate_size=-1"], "model.intermediate_size"),
    (["model.num_heads=3"], "model.num_heads"),  # 32 / 3 is no whole head size
    (["model.max_position_embeddings=4"], "model.max_position_embeddings"),  # arith prompt + 6 tokens > 4
    (["model.dtype=float8"], "model.dtype"),
    (["model.sft.steps=-1"], "model.sft.steps"),
    (["model.sft.batch_size=0"], "model.sft.batch_size"),
    (["model.sft.demo_prefix_frac=2"], "model.sft.demo_prefix_frac"),
    (["algo.adv_eps=-1"], "algo.adv_eps"),
    (["rollout.eval_max_new_tokens=0"], "rollout.eval_max_new_tokens"),
    (["scaling.fit=bogus"], "scaling.fit"),
    (["quant.format=int3"], "quant.format"),
    (["quant.kernel=bogus"], "quant.kernel"),
    (["task.rewards={}"], "task.rewards is empty"),
    # task.holdout carves a file's held-out split: on a generated task nothing read it (silently ignored)
    (["task.holdout=10"], "task.holdout=10 carves a file task's held-out split"),
    (["task.holdout=10"], "but task.name=arith generates its own"),
    (["task=wordproblems", "task.holdout=5"], "but task.name=wordproblems generates its own"),
    # AdamW on 16-bit weights: an update below half a unit in the last place rounds away (bf16: 2^-8 relative)
    (["model.finetune=full", "model.dtype=bfloat16"], "model.finetune=full with model.dtype=bfloat16"),
    (["model.finetune=full", "model.dtype=float16"], "model.finetune=full with model.dtype=float16"),
]


@pytest.mark.integration
@pytest.mark.parametrize("over,key", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_invalid_value_is_refused_before_any_model_is_built(tmp_path, monkeypatch, over, key):
    from rlx.train import run

    monkeypatch.setenv("RLX_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        run(compose(TINY + over), tmp_path / "run")
    assert not (tmp_path / "cache").exists()  # no SFT base was built
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_free_form_keys_are_still_allowed():
    from rlx.config import unknown_keys

    cfg = compose(["experiment=scalerl_8b", "model.path=/m", "task.train_path=/a", "task.eval_path=/b"])
    assert unknown_keys(cfg) == []  # `paper:` notes are free-form
    cfg = compose(["+task.rewards.format=0.5"])  # reward weights are a free dict: adds to the task file's set
    assert unknown_keys(cfg) == [] and dict(cfg.task.rewards) == {"correct": 1.0, "format": 0.5}


def test_quantizers_refuse_bad_inputs_with_a_clear_error():
    import torch

    from rlx.quant.formats import dequantize, quantize

    w = torch.randn(4, 32)
    for fmt in ("nvfp4", "nf4", "mxfp4"):
        with pytest.raises(ValueError, match="empty"):
            quantize(torch.zeros(0, 32), fmt)
        with pytest.raises(ValueError, match="empty"):
            quantize(torch.zeros(4, 0), fmt)
        with pytest.raises(ValueError, match="torch.Tensor"):
            quantize([[1.0] * 32], fmt)
    for bad in (0.0, float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError, match="global_scale must be finite and > 0"):
            quantize(w, "nvfp4", global_scale=torch.tensor([bad]))
    with pytest.raises(ValueError, match="double quantization overflows"):
        quantize(torch.full((4, 64), 3e38), "nf4", double_quant=True)
    assert torch.isfinite(dequantize(quantize(torch.full((4, 64), 3e38), "nf4"))).all()


# ---- every numeric field of every schema: NaN, inf and an out-of-range value -------------------------
# A walk of the composed config, not a list: a field any package adds later is covered by the same test.
# Lists and dicts get one entry each so that their elements are walked too.
WALKED = TINY + ["task.rewards={correct: 1.0}", "task.eval={own:{n: 4}}", "rollout.stop_token_ids=[3]",
                 "extrapolation.extend_at=[2]", "rollout.eval_max_new_tokens=6", "rollout.eval_top_p=1.0",
                 "rollout.eval_top_k=0"]
UNBOUNDED = {"task.rewards.correct", "task.default_rewards.correct", "extrapolation.alpha"}  # any finite value


def _numeric_fields():
    from rlx.config.limits import numbers

    cfg = compose(WALKED)
    return cfg, [(k, v) for k, v in numbers(cfg) if not k.startswith("paper")]


def _refused_before_any_model(tmp_path, monkeypatch, cfg, key: str) -> None:
    import re

    from rlx.train import run

    monkeypatch.setenv("RLX_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ValueError, match=re.escape(key)):
        run(cfg, tmp_path / "run")
    assert not (tmp_path / "cache").exists()  # no SFT base was built
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_the_walk_reaches_every_kind_of_numeric_field():
    _, fields = _numeric_fields()
    keys = {k for k, _ in fields}
    # hand-picked from each schema, list and dict (a walk that missed a kind would miss its new fields)
    assert {"seed", "model.sft.lr", "model.lora.dropout", "task.rewards.correct", "task.eval.own.n",
            "rollout.stop_token_ids.0", "rollout.vllm.kv_cache_gb", "rollout.interrupt.answer_tokens",
            "algo.lr", "noise.sigma_start", "extrapolation.extend_at.0", "scaling.confidence",
            "logger.completions_max_mb", "train.no_signal_steps", "trainer.dist_timeout_s"} <= keys
    assert len(keys) > 100


@pytest.mark.integration
def test_every_numeric_field_refuses_nan_inf_and_out_of_range(tmp_path, monkeypatch):
    import copy

    from omegaconf import OmegaConf
    from omegaconf.errors import ValidationError

    from rlx.config.limits import range_of

    cfg, fields = _numeric_fields()
    pristine = copy.deepcopy(cfg)
    unbounded = set()
    for n, (key, value) in enumerate(fields):
        integer = isinstance(value, int)
        bad = [float("nan"), float("inf"), float("-inf")]
        out = range_of(key).outside(integer)
        if out is None:
            unbounded.add(key)
        else:
            bad.append(out)
        for v in bad:
            if integer and isinstance(v, float):  # an int field cannot even hold NaN / inf: refused on assignment
                with pytest.raises(ValidationError, match=key.split(".")[-1]):
                    OmegaConf.update(cfg, key, v, merge=False)
                continue
            OmegaConf.update(cfg, key, v, merge=False)  # one bad field at a time, set back after its refusal
            try:
                _refused_before_any_model(tmp_path / f"{n}-{v}", monkeypatch, cfg, key)
            finally:
                OmegaConf.update(cfg, key, value, merge=False)
    assert cfg == pristine  # each refusal saw the good config but its one field
    assert unbounded == UNBOUNDED  # a field that takes any finite number must be named here on purpose


def test_the_schema_defaults_pass_the_walk():
    from rlx.config.limits import check_numbers

    for over in ([], TINY, ["experiment=scalerl_8b", "model.path=/m", "task.train_path=/a", "task.eval_path=/b"]):
        check_numbers(compose(over))


# ---- a reward set given on the command line is the whole set ---------------------------------------
def test_reward_override_replaces_the_task_files_set():
    from rlx.tasks import build_task

    assert dict(compose(["task.rewards={format: 1.0}"]).task.rewards) == {"format": 1.0}  # not {correct, format}
    assert dict(compose(["task.rewards.correct=0.5"]).task.rewards) == {"correct": 0.5}  # one weight edited
    assert dict(compose(["task=gsm8k", "task.rewards={correct: 1.0}"]).task.rewards) == {"correct": 1.0}
    assert dict(compose(["experiment=qerl_gsm8k_7b"]).task.rewards) == {"stated_answer": 2.0}  # files replace too
    task = build_task(compose(TINY + ["task.rewards={format: 1.0}"]).task)
    assert task.weights == {"format": 1.0}
    assert list(task.score(task.train[:2], ["12", "x=3"])) == ["format"]


@pytest.mark.integration
def test_a_run_given_format_alone_trains_on_format_alone(tmp_path):
    from tests.conftest import read_metrics, run_tiny

    run_tiny(tmp_path, ["task.rewards={format: 1.0}", "train.steps=1", "train.eval_every=1", "train.ckpt_every=1"])
    rows = [r for r in read_metrics(tmp_path) if r["step"] == 1]
    assert rows and "train/rewards/format" in rows[0]
    assert not any(k.startswith("train/rewards/correct") for r in rows for k in r)
    assert rows[0]["train/reward/mean"] == rows[0]["train/rewards/format"]  # the total is the format reward alone
