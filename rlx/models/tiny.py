"""The default policy: a tiny Qwen2, warm-started by a short SFT on the task's training split, cached on disk
keyed by (model config incl. the SFT seed, task config)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from omegaconf import OmegaConf
from transformers import Qwen2Config, Qwen2ForCausalLM

from rlx.models.config import LEGACY_SFT_KEYS, chat_template_text
from rlx.models.forward import token_logprobs
from rlx.models.sft.loop import schedule
from rlx.models.tokenizer import build_char_tokenizer

CACHE_VERSION = 1


def tiny_config(cfg, vocab_size: int, tok) -> Qwen2Config:
    return Qwen2Config(vocab_size=vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
                       num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
                       num_key_value_heads=cfg.num_kv_heads, max_position_embeddings=cfg.max_position_embeddings,
                       tie_word_embeddings=False, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                       eos_token_id=tok.eos_token_id, attn_implementation="sdpa")


def cache_key(model_cfg, task_cfg) -> str:
    m = OmegaConf.to_container(model_cfg, resolve=False) if OmegaConf.is_config(model_cfg) else dict(model_cfg)
    m = {k: v for k, v in m.items() if k not in ("lora", "cache_dir", "path", "dtype")}
    if m.get("chat_template") is None:  # keys added later leave the keys of existing caches unchanged
        m.pop("chat_template", None)
    else:  # the template's text: a file named by path is keyed by what it holds
        m["chat_template"] = chat_template_text(m["chat_template"])
    if not m.get("chat_prompts"):
        m.pop("chat_prompts", None)
    m.pop("gguf_file", None)  # the gguf source's key, no part of the tiny model
    for k in ("finetune", "gradient_checkpointing"):  # how the base is trained by RL, not what it is
        m.pop(k, None)
    if isinstance(m.get("sft"), dict):  # the SFT stage's keys (rlx.models.sft) are no part of the warm start's base
        m["sft"] = {k: v for k, v in m["sft"].items() if k in LEGACY_SFT_KEYS}
    t = OmegaConf.to_container(task_cfg, resolve=True) if OmegaConf.is_config(task_cfg) else dict(task_cfg)
    t.pop("eval", None)  # the eval sets do not shape the SFT base (it trains on the training split)
    t.pop("default_rewards", None)  # the resolved `rewards` is in the key (as before default_rewards existed)
    blob = json.dumps({"v": CACHE_VERSION, "model": m, "task": t}, sort_keys=True)  # model.sft.seed is in m
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def sft_warm_start(model, tok, task, sft_cfg, seed: int, log=print) -> dict:
    """Teacher-forced cross-entropy on prompt -> target completion (+eos) of the training split."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=sft_cfg.lr, weight_decay=0.0)
    total = sft_cfg.steps
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: schedule(s, total, sft_cfg.warmup_steps))
    data = task.train
    model.train()
    loss_v = float("nan")
    for step in range(total):
        idx = torch.randint(len(data), (sft_cfg.batch_size,), generator=g).tolist()
        prompts = [tok(data[i].prompt, add_special_tokens=False).input_ids for i in idx]
        sloppy = ((torch.rand(len(idx), generator=g) < sft_cfg.demo_prefix_frac).tolist()
                  if sft_cfg.demo_prefix_frac > 0 else [False] * len(idx))  # clean: no draw
        # the imperfect demonstrator writes demo_prefix before a sloppy row's target
        targets = [tok((sft_cfg.demo_prefix if f else "") + data[i].target, add_special_tokens=False).input_ids
                   + [tok.eos_token_id] for i, f in zip(idx, sloppy)]
        P = max(len(p) for p in prompts)
        T = max(len(t) for t in targets)
        ids = torch.full((len(idx), P + T), tok.pad_token_id)
        mask = torch.zeros((len(idx), P + T), dtype=torch.long)
        tmask = torch.zeros((len(idx), T))
        for r, (p, t) in enumerate(zip(prompts, targets)):
            ids[r, P - len(p) : P] = torch.tensor(p)
            ids[r, P : P + len(t)] = torch.tensor(t)
            mask[r, P - len(p) : P + len(t)] = 1
            tmask[r, : len(t)] = 1
        logp = token_logprobs(model, ids, mask, T)  # [B, T]
        loss = -(logp * tmask).sum() / tmask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        loss_v = loss.item()
        if (step + 1) % 100 == 0:
            log(f"[sft] step {step + 1}/{total} loss {loss_v:.4f}")
    model.eval()
    return {"sft/final_loss": loss_v}


def load_or_build_tiny(model_cfg, task_cfg, task, log=print, tok=None):
    """The SFT-warm-started tiny base for (model config, task config), built once and cached."""
    tok = build_char_tokenizer() if tok is None else tok
    key = cache_key(model_cfg, task_cfg)
    cache = Path(model_cfg.cache_dir).expanduser().resolve() / f"tiny-{key}"  # absolute: adapters record it as their base
    if not (cache / "config.json").is_file():
        _build_and_publish(model_cfg, task, tok, cache, log)
    log(f"[model] tiny base from cache {cache}")
    model = Qwen2ForCausalLM.from_pretrained(cache, dtype=torch.float32)  # saved copy: fresh = resumed, bitwise
    return model.eval(), tok, cache


def _build_and_publish(model_cfg, task, tok, cache: Path, log) -> None:
    seed = model_cfg.sft.seed
    log(f"[model] building tiny base (cache miss) -> {cache}")
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(tiny_config(model_cfg, len(tok), tok))
    if model_cfg.sft.steps > 0:
        sft_warm_start(model, tok, task, model_cfg.sft, seed, log)
    publish(model, tok, cache)


def publish(model, tok, cache: Path, files: dict[str, str] | None = None) -> None:
    """Atomic publish of model + tokenizer (+ `files`: name -> text) at `cache` (temp dir + rename); when a
    concurrent builder wins the race, its identical copy is used."""
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{cache.name}-", dir=cache.parent))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        for name, text in (files or {}).items():
            (tmp / name).write_text(text)
        os.rename(tmp, cache)
    except OSError:
        if not (cache / "config.json").is_file():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
