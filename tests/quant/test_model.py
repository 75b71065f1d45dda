"""quantize_model on a tiny Qwen2: which modules change, memory, shared global scales, forward."""

import pytest
import torch
from torch import nn

from rlx.quant import QuantConfig, QuantLinear, dequantize, quantize, quantize_model, quantized_bytes
from rlx.quant.nvfp4 import shared_global_scale
from tests.quant.quant_helpers import LINEAR_NAMES, tiny_qwen, token_ids

FORMATS = ("nvfp4", "nf4", "mxfp4")


def test_none_returns_model_unchanged():
    model = tiny_qwen()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert quantize_model(model, QuantConfig(format="none")) is model
    assert not any(isinstance(m, QuantLinear) for m in model.modules())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("fmt", FORMATS)
def test_only_decoder_linears_are_replaced(fmt):
    model = tiny_qwen()
    embed = model.model.embed_tokens.weight.clone()
    head = model.lm_head.weight.clone()
    norms = {n: p.clone() for n, p in model.named_parameters() if "norm" in n}
    originals = {n: m.weight.clone() for n, m in model.named_modules() if n.endswith(LINEAR_NAMES)}
    quantize_model(model, QuantConfig(format=fmt, fuse_global_scales=False))

    replaced = {n for n, m in model.named_modules() if isinstance(m, QuantLinear)}
    assert replaced == set(originals)  # all 7 projections of both layers, nothing else
    assert isinstance(model.lm_head, nn.Linear) and torch.equal(model.lm_head.weight, head)
    assert torch.equal(model.model.embed_tokens.weight, embed)
    assert all(torch.equal(p, norms[n]) for n, p in model.named_parameters() if "norm" in n)
    for name, weight in originals.items():  # each packed layer holds exactly quantize(original weight)
        module = model.get_submodule(name)
        assert module.fmt == fmt
        assert torch.equal(module.dequantize(), dequantize(quantize(weight, fmt)))


def test_no_full_precision_weight_is_kept():
    model = tiny_qwen()
    quantize_model(model, QuantConfig(format="nvfp4"))
    for module in model.modules():
        if isinstance(module, QuantLinear):
            assert not hasattr(module, "weight")
            shapes = [t.shape for t in list(module.buffers()) + list(module.parameters())]
            assert torch.Size((module.out_features, module.in_features)) not in shapes
            assert all(p.requires_grad is False for p in module.parameters())


def test_nvfp4_tiny_model_memory_within_limit():
    model = tiny_qwen(hidden=64, intermediate=128)
    linear_bytes = sum(
        m.weight.numel() * m.weight.element_size() for n, m in model.named_modules() if n.endswith(LINEAR_NAMES)
    )
    quantize_model(model, QuantConfig(format="nvfp4"))
    packed, sixteen_bit = quantized_bytes(model)
    assert sixteen_bit == linear_bytes
    # counted directly on the module tensors: codes + fp8 scales + fp32 global scales
    direct = sum(
        t.numel() * t.element_size() for m in model.modules() if isinstance(m, QuantLinear) for t in m.buffers()
    )
    assert packed == direct
    assert packed / sixteen_bit <= 0.285  # 4.5 / 16 = 0.28125 plus one fp32 global scale per layer


def test_nvfp4_fused_groups_share_global_scale():
    model = tiny_qwen()
    layer = model.model.layers[0]
    qkv = [layer.self_attn.q_proj.weight, layer.self_attn.k_proj.weight, layer.self_attn.v_proj.weight]
    gate_up = [layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight]
    expected_qkv, expected_gu = shared_global_scale(qkv), shared_global_scale(gate_up)
    quantize_model(model, QuantConfig(format="nvfp4"))
    scale = lambda m: m.quantized_weight.global_scale  # noqa: E731
    for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
        assert torch.equal(scale(proj), expected_qkv)
    for proj in (layer.mlp.gate_proj, layer.mlp.up_proj):
        assert torch.equal(scale(proj), expected_gu)
    # o_proj / down_proj keep their own scale; without fusion q/k/v scales differ
    unfused = tiny_qwen()
    quantize_model(unfused, QuantConfig(format="nvfp4", fuse_global_scales=False))
    attn = unfused.model.layers[0].self_attn
    assert len({scale(p).item() for p in (attn.q_proj, attn.k_proj, attn.v_proj)}) > 1


@pytest.mark.parametrize("fmt", FORMATS)
def test_forward_close_to_16_bit(fmt):
    model = tiny_qwen()
    ids = token_ids()
    with torch.no_grad():
        ref = model(ids).logits.float()
        quantize_model(model, QuantConfig(format=fmt))
        out = model(ids).logits.float()
    rel = (out - ref).norm() / ref.norm()
    assert 0 < rel < 0.3  # 4-bit noise: present but bounded


def test_forward_equals_dense_linear_on_dequantized_weight():
    layer = nn.Linear(64, 32, bias=True).to(torch.bfloat16)
    qt = quantize(layer.weight.detach(), "nvfp4")
    packed = QuantLinear(qt, layer.bias, kernel="torch")
    x = torch.randn(3, 5, 64, dtype=torch.bfloat16)
    expected = nn.functional.linear(x, dequantize(qt, torch.bfloat16), layer.bias)
    assert torch.equal(packed(x), expected)


def test_dtype_casts_do_not_touch_scales():
    model = tiny_qwen()
    quantize_model(model, QuantConfig(format="nvfp4"))
    proj = model.model.layers[0].self_attn.q_proj
    before = proj.dequantize(torch.float32)
    model.to(torch.float16)
    assert proj.quantized_weight.scale.dtype == torch.float8_e4m3fn
    assert proj.quantized_weight.global_scale.dtype == torch.float32
    assert torch.equal(proj.dequantize(torch.float32), before)
    assert proj.bias.dtype == torch.float16


def test_config_errors():
    with pytest.raises(ValueError, match="unknown quant format"):
        quantize_model(tiny_qwen(), QuantConfig(format="fp3"))
    with pytest.raises(ValueError, match="kernel"):
        quantize_model(tiny_qwen(), QuantConfig(format="nvfp4", kernel="cuda"))
    with pytest.raises(ValueError, match="matched no nn.Linear"):
        quantize_model(tiny_qwen(), QuantConfig(format="nvfp4", targets=["qkv"]))
    with pytest.raises(ValueError, match="not a multiple of the mxfp4 block size 32"):
        quantize_model(tiny_qwen(hidden=48, intermediate=96), QuantConfig(format="mxfp4"))
    with pytest.raises(ValueError, match="decoder blocks"):
        quantize_model(nn.Sequential(nn.Linear(16, 16)), QuantConfig(format="nvfp4"))
