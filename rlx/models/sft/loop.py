"""The SFT stage's optimization: token-mean cross-entropy on completion tokens, AdamW with linear warm-up then
cosine decay, and the held-out loss before, during and after."""

from __future__ import annotations

import math
import random
import time

import torch

from rlx.models.forward import token_logprobs
from rlx.models.sft.batches import Batch, Encoded, collate, plan

HEAD_CHUNK = 1024  # LM-head tokens at a time: no [B, T, V] logits (SmolLM2's V = 49,152)


def batch_nll(model, batch: Batch) -> tuple[torch.Tensor, int]:
    """(summed NLL of the completion tokens, their count); prompt and padding cost no head FLOP."""
    device = next(model.parameters()).device
    need = batch.loss_mask.to(device)
    logp = token_logprobs(model, batch.ids.to(device), batch.mask.to(device), batch.n_completion,
                          chunk=HEAD_CHUNK, need=need)  # [B, T], 0 where need is 0
    return -(logp * need).sum(), int(need.sum().item())


@torch.no_grad()
def heldout_loss(model, rows: list[Encoded], batch_tokens: int, pad_id: int) -> float:
    """Mean NLL per completion token over `rows` (token-weighted), in eval mode; NaN without rows."""
    if not rows:
        return math.nan
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for idx in plan([len(r) for r in rows], batch_tokens, None):
        nll, n = batch_nll(model, collate([rows[i] for i in idx], pad_id))
        total, count = total + nll.item(), count + n
    model.train(was_training)
    return total / count


def schedule(step: int, total: int, warmup: int) -> float:
    """LR factor: linear warm-up over `warmup` steps, then cosine to 0 at `total` (the tiny warm start's)."""
    return min(1.0, (step + 1) / max(1, warmup)) * 0.5 * (1 + math.cos(math.pi * min(step, total) / total))


def batches(train: list[Encoded], batch_tokens: int, seed: int, steps: int, epochs: float) -> list[list[int]]:
    """Epoch after epoch of plan() (seeded per epoch): ceil(epochs * one pass) batches, or `steps` (epochs 0)."""
    lengths = [len(r) for r in train]

    def epoch(e: int) -> list[list[int]]:
        return plan(lengths, batch_tokens, random.Random(f"sft-{seed}-{e}"))

    first = epoch(0)
    total = math.ceil(epochs * len(first)) if epochs > 0 else steps
    out, e = list(first), 1
    while len(out) < total:
        out += epoch(e)
        e += 1
    return out[:total]


def train(model, train_rows: list[Encoded], eval_rows: list[Encoded], sft, pad_id: int, log) -> tuple[dict, list[dict]]:
    """Train `model` in place; (summary with the held-out loss before and after, metric rows)."""
    order = batches(train_rows, sft.batch_tokens, sft.seed, sft.steps, sft.epochs)
    total = len(order)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=sft.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: schedule(s, total, sft.warmup_steps))
    rows: list[dict] = []
    before = heldout_loss(model, eval_rows, sft.batch_tokens, pad_id)
    rows.append({"step": 0, "sft/eval_loss": before})
    log(f"[sft] {total} steps on {len(train_rows)} rows, held-out loss on {len(eval_rows)} rows: {before:.4f} before")
    every = max(1, total // 10)
    model.train()
    t_train, window = 0.0, []
    for step, idx in enumerate(order, 1):
        t0 = time.perf_counter()
        nll, n = batch_nll(model, collate([train_rows[i] for i in idx], pad_id))
        loss = nll / n
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        dt = time.perf_counter() - t0
        t_train += dt
        window.append(loss.item())
        row = {"step": step, "sft/loss": loss.item(), "sft/grad_norm": grad_norm.item(), "sft/lr": opt.param_groups[0]["lr"],
               "sft/rows": len(idx), "sft/tokens": n, "timing_s/step": dt}
        if sft.eval_every and step % sft.eval_every == 0 and step < total:
            row["sft/eval_loss"] = heldout_loss(model, eval_rows, sft.batch_tokens, pad_id)
        rows.append(row)
        if step % every == 0 or step == total:
            extra = f" held-out {row['sft/eval_loss']:.4f}" if "sft/eval_loss" in row else ""
            log(f"[sft] step {step}/{total} loss {sum(window) / len(window):.4f}{extra} ({t_train / step:.2f} s/step)")
            window = []
    after = heldout_loss(model, eval_rows, sft.batch_tokens, pad_id)
    rows[-1]["sft/eval_loss"] = after
    model.eval()
    log(f"[sft] held-out loss {before:.4f} -> {after:.4f} ({total} steps, {t_train:.0f}s)")
    summary = {"sft/eval_loss_before": before, "sft/eval_loss_after": after, "sft/steps": total,
               "sft/train_rows": len(train_rows), "sft/eval_rows": len(eval_rows),
               "sft/train_tokens": sum(len(r.completion) for r in train_rows),
               "sft/final_loss": rows[-1]["sft/loss"] if total else math.nan,
               "timing_s/sft_step": t_train / max(1, total)}
    return summary, rows
