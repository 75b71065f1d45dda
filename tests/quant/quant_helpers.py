"""Shared helpers for the quant tests: reference-library calls and a tiny Qwen2 model."""

from __future__ import annotations

import pytest
import torch

from tests.tiny import tiny_qwen2

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
LINEAR_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def ct_nvfp4(weight: torch.Tensor, global_scale: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """compressed-tensors' own NVFP4A16 quantization of one weight (min-max observer, as llm-compressor
    runs it): generate_gparam -> calculate_qparams -> NVFP4PackedCompressor.compress."""
    pytest.importorskip("compressed_tensors")
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.quantization.quant_scheme import NVFP4A16, QuantizationScheme
    from compressed_tensors.quantization.utils.helpers import calculate_qparams, generate_gparam

    scheme = QuantizationScheme(targets=["Linear"], **NVFP4A16)
    if global_scale is None:
        global_scale = generate_gparam(weight.amin(), weight.amax())
    groups = weight.unflatten(-1, (-1, 16))
    scale, _ = calculate_qparams(groups.amin(-1), groups.amax(-1), scheme.weights, global_scale=global_scale)
    state = {"weight": weight, "weight_scale": scale, "weight_global_scale": global_scale}
    return NVFP4PackedCompressor.compress(state, scheme)


def ct_global_scale(weight: torch.Tensor) -> torch.Tensor:
    from compressed_tensors.quantization.utils.helpers import generate_gparam

    return generate_gparam(weight.amin(), weight.amax())


def tiny_qwen(hidden: int = 64, intermediate: int = 128, tie: bool = False, seed: int = 0, dtype=torch.bfloat16):
    """The suite's tiny Qwen2 (tests/tiny.py) with vocab 128; q/k/v carry biases as in Qwen2."""
    model = tiny_qwen2(seed, dtype, vocab_size=128, hidden_size=hidden, intermediate_size=intermediate,
                       tie_word_embeddings=tie)
    with torch.no_grad():  # HF inits biases to zero; make them non-trivial so bias handling is tested
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.02)
    return model.eval()


def token_ids(batch: int = 2, length: int = 8, seed: int = 1) -> torch.Tensor:  # [B, T]
    return torch.randint(0, 128, (batch, length), generator=torch.Generator().manual_seed(seed))
