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
]


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
    assert unknown_keys(compose(["+task.rewards.format=0.5"])) == []  # reward weights are a free dict


def test_quantizers_refuse_bad_inputs_with_a_clear_error():
    import torch

    from rlx.quant.formats import quantize

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
    assert torch.isfinite(quantize(torch.full((4, 64), 3e38), "nf4").dequantize()).all()
