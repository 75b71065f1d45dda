"""Predict-extend on a tiny PEFT-wrapped Qwen2ForCausalLM: the policy moves, the base does not."""

import io

import pytest
import torch

from rlx.extrapolation import ExtrapolationConfig, build_extrapolator
from rlx.extrapolation.lora import lora_modules

EXTEND = 8


def _next_cfg(**kw):
    base = dict(type="next", interval=2, horizon=4, extend_at=[EXTEND], alpha=1.5, hidden=16, epochs=40, lr=3e-3)
    base.update(kw)
    return ExtrapolationConfig(**base)


def _frozen_state(model) -> dict[str, torch.Tensor]:
    """Every non-LoRA parameter and buffer (packed codes and quant scales included)."""
    out = {}
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if "lora_" not in name:
            out[name] = t.detach().clone()
    for name, module in model.named_modules():  # bitsandbytes keeps its absmax in a side object
        qs = getattr(getattr(module, "weight", None), "quant_state", None)
        if qs is not None:
            out[name + ".absmax"] = qs.absmax.clone()
    return out


def _deltas(model) -> dict[str, torch.Tensor]:
    return {m.name: m.scaling * (m.B.detach().double() @ m.A.detach().double()) for m in lora_modules(model)}


def _run_until_jump(make_policy, make_optimizer, train_step, cfg, quantized=False):
    model = make_policy(seed=0, quantized=quantized)
    opt = make_optimizer(model)
    ext = build_extrapolator(cfg, total_steps=12)
    ext.observe(model, 0, opt)
    for step in range(1, EXTEND):
        train_step(model, opt, step)
        ext.observe(model, step, opt)
    train_step(model, opt, EXTEND)
    return model, opt, ext


def _check_jump_moves_policy_not_base(model, opt, ext, probe_logits):
    frozen, deltas = _frozen_state(model), _deltas(model)
    logits = probe_logits(model)
    rng = torch.get_rng_state()
    metrics = ext.observe(model, EXTEND, opt)
    assert torch.equal(rng, torch.get_rng_state())  # the extrapolator never draws from the global RNG
    assert metrics["extrap/jumps"] == 1.0
    assert (probe_logits(model) - logits).abs().max() > 1e-3  # the policy changed
    after = _frozen_state(model)
    assert after.keys() == frozen.keys()
    for name, t in frozen.items():
        assert torch.equal(t, after[name]), f"frozen tensor {name} changed"
    # AdamW state of the LoRA params was dropped, so the next step restarts their moments
    lora_params = {id(p) for m in lora_modules(model) for p in (m.A, m.B)}
    assert not any(id(p) in lora_params for p in opt.state)
    assert metrics["extrap/optimizer_states_reset"] == 2 * len(lora_modules(model))
    return deltas, metrics


def test_next_jump_changes_policy_keeps_base_and_folds_the_prediction(make_policy, make_optimizer, train_step, probe_logits):
    model, opt, ext = _run_until_jump(make_policy, make_optimizer, train_step, _next_cfg())
    before, metrics = _check_jump_moves_policy_not_base(model, opt, ext, probe_logits)
    assert metrics["extrap/records"] == EXTEND // 2 + 1
    assert metrics["extrap/steps_saved"] == 1.5 * 4
    assert metrics["extrap/predictor_loss"] < metrics["extrap/predictor_loss_first"]
    after = _deltas(model)
    r = lora_modules(model)[0].rank
    for name, (u, sigma, v) in ext.last_prediction.items():
        intended = before[name] + 1.5 * float(sigma) * torch.outer(u.double(), v.double())  # W0 + delta + alpha dW
        sv = torch.linalg.svdvals(intended)
        # rank r + 1 in general: the fold is the best rank-r approximation, off by sigma_{r+1} only
        err = torch.linalg.matrix_norm(after[name] - intended, ord=2)
        assert abs(float(err) - float(sv[r])) <= 1e-4 * float(sv[0]) + 1e-6, name
        assert float(sv[r]) <= 1.5 * float(sigma) + 1e-6


def test_linear_jump_scales_the_lora_delta_exactly(make_policy, make_optimizer, train_step, probe_logits):
    cfg = ExtrapolationConfig(type="linear", extend_at=[EXTEND], alpha=1.5)
    model, opt, ext = _run_until_jump(make_policy, make_optimizer, train_step, cfg)
    A_before = {m.name: m.A.detach().clone() for m in lora_modules(model)}
    before, metrics = _check_jump_moves_policy_not_base(model, opt, ext, probe_logits)
    assert metrics["extrap/records"] == 0 and metrics["extrap/steps_saved"] == 0.5 * EXTEND
    after = _deltas(model)
    for m in lora_modules(model):  # PEFT init has B0 = 0, so W0 + alpha (W_s - W0) = W0 + alpha * delta
        assert torch.equal(m.A.detach(), A_before[m.name])
        diff = (after[m.name] - 1.5 * before[m.name]).abs().max()
        assert diff <= 1e-6 * before[m.name].abs().max(), (m.name, float(diff), float(before[m.name].abs().max()))


@pytest.mark.parametrize("kind", ["next", "linear"])
def test_jump_on_nf4_base_keeps_packed_codes(kind, make_policy, make_optimizer, train_step, probe_logits):
    pytest.importorskip("bitsandbytes")
    cfg = _next_cfg() if kind == "next" else ExtrapolationConfig(type="linear", extend_at=[EXTEND], alpha=1.5)
    model, opt, ext = _run_until_jump(make_policy, make_optimizer, train_step, cfg, quantized=True)
    packed = [n for n, p in model.named_parameters() if p.dtype == torch.uint8]
    assert len(packed) == 2 * 7  # every decoder linear is a packed NF4 Linear4bit
    _check_jump_moves_policy_not_base(model, opt, ext, probe_logits)


def test_resume_across_the_jump_is_bitwise_identical(make_policy, make_optimizer, train_step):
    cfg, total, save_at = _next_cfg(extend_at=[6, 10]), 12, 5

    def run(resume_from=None):
        model = make_policy(seed=0)
        opt = make_optimizer(model)
        ext = build_extrapolator(cfg, total_steps=total)
        start = 1
        if resume_from is not None:
            sd = torch.load(io.BytesIO(resume_from), weights_only=False)
            model.load_state_dict(sd["model"], strict=False)
            opt.load_state_dict(sd["opt"])
            ext.load_state_dict(sd["ext"])
            start = sd["step"] + 1
        ext.observe(model, 0, opt)  # the loop may always call this: a no-op after a resume
        history, saved = {}, None
        for step in range(start, total + 1):
            train_step(model, opt, step)
            metrics = ext.observe(model, step, opt)
            history[step] = {k: v for k, v in metrics.items() if "time_s" not in k}
            if step == save_at and resume_from is None:
                buf = io.BytesIO()
                lora = {k: v.clone() for k, v in model.state_dict().items() if "lora_" in k}
                torch.save({"model": lora, "opt": opt.state_dict(), "ext": ext.state_dict(), "step": step}, buf)
                saved = buf.getvalue()
        return {m.name: (m.A.detach().clone(), m.B.detach().clone()) for m in lora_modules(model)}, history, saved

    final_a, hist_a, saved = run()
    final_b, hist_b, _ = run(resume_from=saved)
    assert hist_a[12]["extrap/jumps"] == 2.0
    for step in range(save_at + 1, total + 1):
        assert hist_a[step] == hist_b[step], step
    for name, (A, B) in final_a.items():
        assert torch.equal(A, final_b[name][0]) and torch.equal(B, final_b[name][1]), name
