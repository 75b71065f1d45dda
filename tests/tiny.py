"""The one tiny-model builder of the suite: a 2-layer Qwen2 of any small shape, and the LoRA policy over it
that every engine serves (tests/conftest.py's `make_tiny_model` and `tiny_lora_policy` fixtures hand them
out; tests/rollout/conftest.py serves it on every engine)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

# the default shape: head_dim 16, 2 KV heads; the keyword arguments of tiny_qwen2 override any key
SHAPE = dict(vocab_size=32, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False)
# the smallest: one layer of hidden 16, for checkpoint files and state round trips
MINIMAL = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
# head_dim 32 (vLLM's CPU attention needs >= 32) and a sharpened init: greedy has clear winners
SERVABLE = dict(hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=1,
                max_position_embeddings=128, initializer_range=0.2)


def tiny_qwen2(seed: int = 0, dtype: torch.dtype = torch.float32, tok=None, **config):
    """Qwen2ForCausalLM (eval mode) of SHAPE updated by `config` (Qwen2Config keys), initialised in `dtype`
    from torch.manual_seed(seed). With `tok` the vocabulary and the pad / bos / eos ids are the tokenizer's."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    ids = {} if tok is None else dict(vocab_size=len(tok), pad_token_id=tok.pad_token_id,
                                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    cfg = Qwen2Config(**{**SHAPE, **ids, **config})
    torch.manual_seed(seed)
    return Qwen2ForCausalLM._from_config(cfg, dtype=dtype).eval()


def servable_qwen2(path, seed: int = 0, eos_weight: float = 1.0, **config):
    """(model, char tokenizer): a tiny_qwen2 that vLLM's CPU backend serves, its eos row of the head scaled by
    `eos_weight`, saved with its tokenizer to `path` (what an engine loads)."""
    from rlx.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    model = tiny_qwen2(seed, tok=tok, **{**SERVABLE, **config})
    if eos_weight != 1.0:
        with torch.no_grad():
            model.lm_head.weight[tok.eos_token_id] *= eos_weight
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return model, tok


def tiny_policy(path, seed: int = 0):
    """(policy, tok): servable_qwen2 at `path` with eos made a real option, wrapped by rlx's LoRA with B
    non-zero (so the adapter changes what the policy samples)."""
    from rlx.models import attach_lora

    model, tok = servable_qwen2(path, seed, eos_weight=2.0)
    lora = SimpleNamespace(r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"])
    policy = attach_lora(model, lora)
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.3, generator=torch.Generator().manual_seed(1))
    return policy.eval(), tok
