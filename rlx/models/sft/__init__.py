"""The SFT stage of any model (model.sft.data; docs/models.md, "SFT warm start for any model"): fine-tuned on
chat-rendered pairs, loss on the completion, saved once under `model.cache_dir/sft-<key>`, RL's base."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import torch

from rlx.models.tiny import publish
from rlx.models.sft import data as sft_data
from rlx.models.sft import loop
from rlx.models.sft.batches import Encoded, encode
from rlx.models.sft.cache import key_inputs, sft_dir

RECORD = "sft.json"  # the stage's summary beside the weights
METRICS = "sft_metrics.jsonl"  # one row per SFT step (loss, lr, tokens, s/step; held-out loss when measured)


def enabled(model_cfg) -> bool:
    """Whether the SFT stage builds the base (model.sft.data set)."""
    return model_cfg.sft.data is not None


def base_label(cfg) -> str:
    """"SFT" (the SFT stage, or the tiny warm start) or "pretrained" (hf / gguf as loaded, the tiny random init)."""
    if enabled(cfg.model) or (cfg.model.source == "tiny" and cfg.model.sft.steps > 0):
        return "SFT"
    return "pretrained"


def select(cfg, task, tok, log=print) -> list[sft_data.Pair]:
    """The SFT rows (train and held-out): model.sft.data without the task's held-out questions, its first n."""
    sft = cfg.model.sft
    pairs = sft_data.read_pairs(cfg, task, tok)
    held = sft_data.held_out_ids(cfg, task)
    pairs = sft_data.drop_held_out(pairs, held, sft.data, log)
    if sft.n:
        if sft.n > len(pairs):
            raise ValueError(f"model.sft.n={sft.n} exceeds the {len(pairs)} usable rows of model.sft.data={sft.data} "
                             f"(the task's held-out questions dropped)")
        pairs = pairs[: sft.n]
    sft_data.check_disjoint(pairs, held)
    if sft.exclude_from_rl:
        sft_data.exclude_from_rl(task, pairs, log)
    return pairs


def _encode(pairs: list[sft_data.Pair], tok, limit: int, what: str, log) -> list[Encoded]:
    """Token ids of each pair; rows over `limit` tokens or without a prompt token are dropped, counted."""
    rows = [encode(tok, p.prompt, p.completion) for p in pairs]
    kept = [r for r in rows if len(r) <= limit and r.prompt]
    if len(kept) < len(rows):
        log(f"[sft] dropped {len(rows) - len(kept)} of {len(rows)} {what} rows longer than {limit} tokens "
            f"(model.sft.max_len / the model's context) or without a prompt")
    return kept


def _trainable(model, sft):
    """The module the stage optimizes: every weight (full) or a fresh LoRA adapter (lora)."""
    if sft.finetune == "full":
        for p in model.parameters():
            p.requires_grad_(True)
        return model
    from peft import LoraConfig, get_peft_model

    for p in model.parameters():
        p.requires_grad_(False)
    return get_peft_model(model, LoraConfig(r=sft.lora.r, lora_alpha=sft.lora.alpha, lora_dropout=sft.lora.dropout,
                                            target_modules=list(sft.lora.target_modules), task_type="CAUSAL_LM"))


def warm_start(cfg, task, tok, start: Callable[[], torch.nn.Module], hf_dir: Path | None, log=print,
               device: torch.device | str = "cpu") -> Path:
    """The SFT result's directory, trained on a cache miss; rows are selected first, so RL skips them either way."""
    sft = cfg.model.sft
    pairs = select(cfg, task, tok, log)
    out = sft_dir(cfg, hf_dir)
    if (out / "config.json").is_file():
        log(f"[sft] SFT base from cache {out}")
        return out
    t0 = time.time()
    log(f"[sft] SFT stage (cache miss) -> {out}")
    train_pairs, eval_pairs = sft_data.split_eval(pairs, sft.eval_frac, sft.seed)
    torch.manual_seed(sft.seed)  # the tiny init and the LoRA init: fixed by the SFT seed, not the run's
    model = start()
    limit = min(sft.max_len, getattr(model.config, "max_position_embeddings", None) or sft.max_len)
    train_rows = _encode(train_pairs, tok, limit, "training", log)
    eval_rows = _encode(eval_pairs, tok, limit, "held-out", log)
    if not train_rows:
        raise ValueError(f"model.sft.data={sft.data}: no training row fits model.sft.max_len={sft.max_len}")
    model = _trainable(model, sft).to(device)
    summary, rows = loop.train(model, train_rows, eval_rows, sft, tok.pad_token_id, log)
    if sft.finetune == "lora":
        model = model.merge_and_unload()  # RL's base: the plain model with the SFT adapter folded in
    model = model.cpu().eval()
    summary.update({"sft/dropped_long": len(train_pairs) + len(eval_pairs) - len(train_rows) - len(eval_rows),
                    "sft/wall_s": time.time() - t0})
    record = {"label": "SFT", "data": sft.data, "finetune": sft.finetune, "summary": summary,
              "rows_fingerprint": sft_data.fingerprint(train_pairs + eval_pairs),
              "key_inputs": key_inputs(cfg, hf_dir)}
    publish(model, tok, out, files={RECORD: json.dumps(record, indent=1, sort_keys=True) + "\n",
                                    METRICS: "".join(json.dumps(r) + "\n" for r in rows)})
    log(f"[sft] SFT base saved to {out} ({summary['sft/wall_s']:.0f}s)")
    return out


def read_record(path: Path) -> dict | None:
    """The summary metrics (sft/eval_loss_before, sft/eval_loss_after, ...) of the SFT result at `path`."""
    f = Path(path) / RECORD
    return json.loads(f.read_text())["summary"] if f.is_file() else None


__all__ = ["enabled", "base_label", "select", "warm_start", "read_record", "sft_dir", "RECORD", "METRICS"]
