"""AQN on a tiny Qwen2 policy: noise reaches the model, restores bitwise, is seeded, channel-wise, equivalent."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.noise.noise_helpers import aqn_config, live_weights, norm_weights, tiny_qwen2
from rlx.noise import NoiseInjector, build_noise, find_norm_sites

T = 100
STAGE1 = 10  # first step of stage 1 (sigma_start) with the default K = 10 over 100 steps


def logits_of(model, ids):  # [B, L, V]
    with torch.no_grad():
        return model(input_ids=ids).logits


def sample(model, ids, seed=1):  # [B, L + 12]
    torch.manual_seed(seed)
    with torch.no_grad():
        return model.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=True, max_new_tokens=12, pad_token_id=0, top_k=0, top_p=1.0
        )


def assert_bitwise(actual: dict, expected: dict):
    assert actual.keys() == expected.keys()
    for name in expected:
        assert torch.equal(actual[name], expected[name]), name


# --- the noise reaches the generating model -------------------------------------------------


def test_noise_changes_logits_and_completions_and_restore_undoes_it(prompt_ids):
    model = tiny_qwen2()
    clean_logits, clean_tokens = logits_of(model, prompt_ids), sample(model, prompt_ids)
    injector = build_noise(aqn_config(), T, seed=0)
    with injector.applied(model, STAGE1) as metrics:
        assert metrics["noise/sigma"] == 1e-2 and metrics["noise/stage"] == 1
        noisy_logits, noisy_tokens = logits_of(model, prompt_ids), sample(model, prompt_ids)
    assert not torch.equal(noisy_logits, clean_logits)
    assert (noisy_logits - clean_logits).abs().max() > 1e-4
    assert not torch.equal(noisy_tokens, clean_tokens)  # same sampling seed, different completions
    assert torch.equal(logits_of(model, prompt_ids), clean_logits)
    assert torch.equal(sample(model, prompt_ids), clean_tokens)


def test_noise_free_first_stage_leaves_weights_and_outputs_bitwise(prompt_ids):
    model = tiny_qwen2()
    before, clean_logits = norm_weights(model), logits_of(model, prompt_ids)
    injector = build_noise(aqn_config(), T, seed=0)
    with injector.applied(model, 3) as metrics:
        assert metrics == {"noise/sigma": 0.0, "noise/stage": 0, "noise/changed_frac": 0.0}
        assert_bitwise(live_weights(model, before), before)
        assert injector.is_clean(model)
        assert torch.equal(logits_of(model, prompt_ids), clean_logits)


def test_norms_are_noisy_while_applied_and_bitwise_clean_after(prompt_ids):
    model = tiny_qwen2()
    before = norm_weights(model)
    others = {n: p.detach().clone() for n, p in model.named_parameters() if n not in before}
    injector = build_noise(aqn_config(), T, seed=0)
    assert injector.is_clean(model)
    metrics = injector.apply(model, 42)
    assert metrics["noise/changed_frac"] == 1.0  # fp32: every channel moved
    during = live_weights(model, before)
    assert all(not torch.equal(during[n], before[n]) for n in before)
    assert not injector.is_clean(model)
    assert_bitwise(live_weights(model, others), others)  # q/k/v..., embeddings, final norm untouched
    injector.restore(model)
    assert_bitwise(live_weights(model, before), before)
    assert injector.is_clean(model)


def test_restore_happens_even_when_generation_raises():
    model = tiny_qwen2()
    before = norm_weights(model)
    injector = build_noise(aqn_config(), T, seed=0)
    with pytest.raises(KeyError):
        with injector.applied(model, STAGE1):
            raise KeyError("generation failed")
    assert not injector.active
    assert_bitwise(live_weights(model, before), before)


def test_apply_twice_without_restore_is_refused():
    model = tiny_qwen2()
    injector = build_noise(aqn_config(), T, seed=0)
    injector.apply(model, STAGE1)
    with pytest.raises(RuntimeError, match="still applied"):
        injector.apply(model, STAGE1 + 1)
    injector.restore(model)
    injector.restore(model)  # a second restore is a no-op


def test_noise_never_accumulates():
    model = tiny_qwen2()
    before = norm_weights(model)
    injector = build_noise(aqn_config(schedule="constant"), T, seed=0)
    with injector.applied(model, 5):
        first = live_weights(model, before)
    for step in range(20):
        with injector.applied(model, step):
            pass
    with injector.applied(model, 5):
        again = live_weights(model, before)
    assert_bitwise(again, first)  # same step, same noise on the same clean weights
    assert_bitwise(live_weights(model, before), before)


# --- seeded, resumable ----------------------------------------------------------------------


def noisy_sequence(injector, model, steps, names):
    out = []
    for step in steps:
        with injector.applied(model, step):
            out.append(live_weights(model, names))
    return out


def test_same_seed_and_step_reproduce_the_noise_after_a_resume():
    cfg = aqn_config()
    model = tiny_qwen2()
    names = list(norm_weights(model))
    full = noisy_sequence(NoiseInjector(cfg, T, seed=3), model, range(10, 20), names)
    # a fresh injector (a resumed run) starting at step 15 draws what the first one drew there
    resumed = noisy_sequence(NoiseInjector(cfg, T, seed=3), model, range(15, 20), names)
    for a, b in zip(full[5:], resumed):
        assert_bitwise(b, a)
    # fresh noise every step, and a different seed gives different noise
    assert not torch.equal(full[0][names[0]], full[1][names[0]])
    other_seed = noisy_sequence(NoiseInjector(cfg, T, seed=4), model, [10], names)[0]
    assert not torch.equal(other_seed[names[0]], full[0][names[0]])


def test_each_norm_gets_its_own_draw():
    model = tiny_qwen2()
    before = norm_weights(model)
    injector = build_noise(aqn_config(), T, seed=0)
    with injector.applied(model, STAGE1):
        noise = [w - before[n] for n, w in live_weights(model, before).items()]
    for i in range(len(noise)):
        for j in range(i + 1, len(noise)):
            assert not torch.allclose(noise[i], noise[j])


# --- channel-wise Gaussian with std sigma ---------------------------------------------------


class WideBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.input_layernorm = nn.RMSNorm(channels)
        self.post_attention_layernorm = nn.RMSNorm(channels)


class WideStack(nn.Module):
    """Just the norms of a 2-block decoder with a wide hidden size, named like Qwen2's."""

    def __init__(self, channels: int, dtype=torch.float32):
        super().__init__()
        self.layers = nn.ModuleList([WideBlock(channels) for _ in range(2)]).to(dtype)


def test_noise_is_channelwise_gaussian_with_std_sigma():
    from scipy import stats

    channels, sigma = 16384, 1e-2
    stack = WideStack(channels)
    for m in stack.modules():
        if isinstance(m, nn.RMSNorm):
            nn.init.zeros_(m.weight)  # clean 0 + z is z exactly, with no rounding against 1.0
    injector = build_noise(aqn_config(schedule="constant", sigma_start=sigma), T, seed=11)
    with injector.applied(stack, 0):
        draws = [m.weight.detach().double() for m in stack.modules() if isinstance(m, nn.RMSNorm)]  # each [C]
    assert len(draws) == 4
    for z in draws:
        assert z.shape == (channels,)
        assert z.unique().numel() > 0.99 * channels  # one draw per channel, not a shared scalar
        assert z.std().item() == pytest.approx(sigma, rel=0.03)  # SE of the std is 0.55% here
        assert abs(z.mean().item()) < 5 * sigma / channels**0.5
        assert stats.kstest(z.numpy(), stats.norm(scale=sigma).cdf).pvalue > 1e-3
    corr = torch.corrcoef(torch.stack(draws))  # [4, 4]: independent draws across norms
    assert (corr - torch.eye(4, dtype=corr.dtype)).abs().max() < 5 / channels**0.5


@pytest.mark.parametrize("sigma", [1e-2, 5e-4])
def test_bf16_rounding_is_reported_by_changed_frac(sigma):
    """bf16 weights at 1.0: 1 + z rounds back to 1 unless z < -2^-9 or z > 2^-8 (half the spacing below/above 1)."""
    from scipy import stats

    stack = WideStack(16384, dtype=torch.bfloat16)
    injector = build_noise(aqn_config(schedule="constant", sigma_start=sigma), T, seed=0)
    metrics = injector.apply(stack, 0)
    expected = stats.norm.cdf(-(2**-9) / sigma) + stats.norm.sf(2**-8 / sigma)  # 0.7706 at 1e-2, 5e-5 at 5e-4
    assert metrics["noise/changed_frac"] == pytest.approx(expected, abs=0.01)
    injector.restore(stack)
    assert all(torch.equal(m.weight, torch.ones_like(m.weight)) for m in stack.modules() if isinstance(m, nn.RMSNorm))


# --- the equivalence claim ------------------------------------------------------------------


def test_norm_noise_equals_column_scaling_of_the_following_projections():
    """W @ (x_hat * (w + z)) == (W * ((w + z) / w)[None, :]) @ (x_hat * w) for q/k/v and gate/up."""
    model = tiny_qwen2(dtype=torch.float64)
    layer = model.model.layers[0]
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():  # non-trivial clean weights
        for norm in (layer.input_layernorm, layer.post_attention_layernorm):
            norm.weight.copy_(1.0 + 0.2 * torch.randn(64, generator=gen, dtype=torch.float64))
    x = torch.randn(2, 5, 64, generator=gen, dtype=torch.float64)  # [B, L, H]
    pairs = [
        (layer.input_layernorm, [layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj]),
        (layer.post_attention_layernorm, [layer.mlp.gate_proj, layer.mlp.up_proj]),
    ]
    clean_w = [norm.weight.detach().clone() for norm, _ in pairs]
    injector = build_noise(aqn_config(schedule="constant", sigma_start=0.05), T, seed=0)
    with injector.applied(model, 0):
        noisy_w = [norm.weight.detach().clone() for norm, _ in pairs]
        noisy_out = [[proj(norm(x)) for proj in projs] for norm, projs in pairs]
    for (norm, projs), w, w_noisy, outs in zip(pairs, clean_w, noisy_w, noisy_out):
        assert not torch.equal(w_noisy, w)
        scale = w_noisy / w  # [H] = 1 + z / w: multiplicative noise per input channel
        clean_in = norm(x)  # [B, L, H] = x_hat * w, with the clean weight restored
        for proj, out in zip(projs, outs):
            ref = F.linear(clean_in, proj.weight * scale[None, :], proj.bias)  # [B, L, out]
            torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)


# --- wrappers: PEFT LoRA, trainable norms, quantized linears --------------------------------


def test_works_through_a_peft_lora_wrapper(prompt_ids):
    from peft import LoraConfig, get_peft_model

    plain, wrapped = tiny_qwen2(), get_peft_model(tiny_qwen2(), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    cfg = aqn_config(include_final_norm=True)
    keys = [s.key for s in find_norm_sites(plain, cfg.targets, True)]
    assert keys == [s.key for s in find_norm_sites(wrapped, cfg.targets, True)]
    assert keys == [f"layers.{i}.{t}" for i in range(2) for t in cfg.targets] + ["norm"]
    before = norm_weights(wrapped, suffixes=("input_layernorm", "post_attention_layernorm", "norm"))
    assert len(before) == 5
    clean_logits = logits_of(wrapped, prompt_ids)
    a, b = NoiseInjector(cfg, T, seed=0), NoiseInjector(cfg, T, seed=0)
    with a.applied(plain, STAGE1), b.applied(wrapped, STAGE1):
        # the same noise as on the unwrapped twin, whatever the PEFT prefix
        noisy_plain = norm_weights(plain, ("input_layernorm", "post_attention_layernorm", "norm")).values()
        for p_plain, p_wrapped in zip(noisy_plain, live_weights(wrapped, before).values(), strict=True):
            assert torch.equal(p_plain, p_wrapped)
        assert not torch.equal(logits_of(wrapped, prompt_ids), clean_logits)
    assert_bitwise(live_weights(wrapped, before), before)
    assert torch.equal(logits_of(wrapped, prompt_ids), clean_logits)


def test_trainable_norms_via_modules_to_save_get_noise_on_the_active_copy(prompt_ids):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        tiny_qwen2(), LoraConfig(r=4, target_modules=["q_proj"], modules_to_save=["input_layernorm", "post_attention_layernorm"])
    )
    before = norm_weights(model)
    assert len(before) == 8  # original + trainable copy, for 2 norms x 2 layers
    clean_logits = logits_of(model, prompt_ids)
    injector = build_noise(aqn_config(), T, seed=0)
    with injector.applied(model, STAGE1):
        live = live_weights(model, before)
        assert all(not torch.equal(live[n], before[n]) for n in before)
        assert not torch.equal(logits_of(model, prompt_ids), clean_logits)
    assert_bitwise(live_weights(model, before), before)


def test_training_updates_between_steps_become_the_new_clean_value():
    model = tiny_qwen2()
    names = list(norm_weights(model))
    params = dict(model.named_parameters())
    injector = build_noise(aqn_config(), T, seed=0)
    reference = tiny_qwen2()  # untouched twin: the noise drawn at step 21 on the original weights
    with injector.applied(reference, 21):
        ref_noise = {n: w - 1.0 for n, w in live_weights(reference, names).items()}

    with injector.applied(model, 20):
        pass
    optimizer = torch.optim.SGD([params[n] for n in names], lr=0.1)
    for n in names:
        params[n].grad = torch.full_like(params[n], -1.0)
    optimizer.step()  # clean weights are now 1.1
    trained = live_weights(model, names)
    assert injector.is_clean(model)  # an in-place update after restore is a legitimate new clean value
    with injector.applied(model, 21):
        for n, w in live_weights(model, names).items():
            torch.testing.assert_close(w - trained[n], ref_noise[n], rtol=0, atol=1e-6)
    assert_bitwise(live_weights(model, names), trained)


def test_training_forward_under_noise_backpropagates_and_restores_after_backward(prompt_ids):
    model = tiny_qwen2().train()
    norm = model.model.layers[0].input_layernorm.weight
    injector = build_noise(aqn_config(apply_in_train_forward=True), T, seed=0)

    def grad_of_norm(step=None):
        model.zero_grad()
        if step is None:
            model(input_ids=prompt_ids).logits.logsumexp(-1).mean().backward()
        else:
            with injector.applied(model, step):
                model(input_ids=prompt_ids).logits.logsumexp(-1).mean().backward()
        return norm.grad.clone()

    clean_weight = norm.detach().clone()
    clean_grad, noisy_grad = grad_of_norm(), grad_of_norm(STAGE1)
    assert torch.isfinite(noisy_grad).all() and not torch.equal(noisy_grad, clean_grad)
    assert torch.equal(norm, clean_weight)

    injector.apply(model, STAGE1)
    loss = model(input_ids=prompt_ids).logits.logsumexp(-1).mean()
    injector.restore(model)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()  # restoring before backward is caught by autograd, not silently wrong


class FakeQuantLinear(nn.Module):
    """A stand-in for a packed quantized linear: int8 codes and per-row scales as buffers, no weight."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        scale = linear.weight.detach().abs().amax(1, keepdim=True) / 127  # [N, 1]
        self.register_buffer("codes", torch.round(linear.weight.detach() / scale).to(torch.int8))  # [N, K]
        self.register_buffer("scale", scale)
        self.bias = linear.bias

    def forward(self, x):
        return F.linear(x, self.codes.float() * self.scale, self.bias)


def test_works_with_quantized_linear_layers(prompt_ids):
    model = tiny_qwen2()
    for block in model.model.layers:
        attn, mlp = (block.self_attn, ("q_proj", "k_proj", "v_proj", "o_proj")), (block.mlp, ("gate_proj", "up_proj", "down_proj"))
        for parent, names in (attn, mlp):
            for name in names:
                setattr(parent, name, FakeQuantLinear(getattr(parent, name)))
    buffers = {n: b.clone() for n, b in model.named_buffers() if n.endswith(("codes", "scale"))}
    before, clean_logits = norm_weights(model), logits_of(model, prompt_ids)
    injector = build_noise(aqn_config(), T, seed=0)
    with injector.applied(model, STAGE1):
        assert not torch.equal(logits_of(model, prompt_ids), clean_logits)
    assert_bitwise(live_weights(model, before), before)
    assert all(torch.equal(b, buffers[n]) for n, b in model.named_buffers() if n in buffers)


# --- configuration ----------------------------------------------------------------------------


def test_final_norm_only_when_configured():
    model = tiny_qwen2()
    final = model.model.norm.weight
    clean = final.detach().clone()
    with build_noise(aqn_config(), T, seed=0).applied(model, STAGE1):
        assert torch.equal(final, clean)
    with build_noise(aqn_config(include_final_norm=True), T, seed=0).applied(model, STAGE1):
        assert not torch.equal(final, clean)
    assert torch.equal(final, clean)


def test_unknown_target_is_a_clear_error():
    model = tiny_qwen2()
    injector = build_noise(aqn_config(targets=["input_layernorm", "pre_feedforward_layernorm"]), T, seed=0)
    with pytest.raises(ValueError, match="'pre_feedforward_layernorm' is missing from decoder blocks"):
        injector.apply(model, STAGE1)
    with pytest.raises(ValueError, match="is not a norm"):
        build_noise(aqn_config(targets=["q_proj"]), T, seed=0).apply(model, STAGE1)


def test_build_noise_by_type():
    assert build_noise(aqn_config(type="none"), T, seed=0) is None
    assert isinstance(build_noise(aqn_config(), T, seed=0), NoiseInjector)
    with pytest.raises(ValueError, match="unknown noise.type 'gaussian'"):
        build_noise(aqn_config(type="gaussian"), T, seed=0)
    with pytest.raises(ValueError, match="unknown noise.schedule"):
        build_noise(aqn_config(schedule="step"), T, seed=0)


@pytest.mark.parametrize("fmt", ["nvfp4", "nf4", "mxfp4"])
def test_works_on_an_rlx_quantized_base(fmt, prompt_ids):
    from rlx.quant import QuantConfig, quantize_model

    model = quantize_model(tiny_qwen2(), QuantConfig(format=fmt))
    before, clean_logits = norm_weights(model), logits_of(model, prompt_ids)
    injector = build_noise(aqn_config(), T, seed=0)
    with injector.applied(model, STAGE1) as metrics:
        assert metrics["noise/changed_frac"] == 1.0
        assert not torch.equal(logits_of(model, prompt_ids), clean_logits)
    assert_bitwise(live_weights(model, before), before)
    assert torch.equal(logits_of(model, prompt_ids), clean_logits)
