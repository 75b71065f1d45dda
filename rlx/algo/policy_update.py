"""One policy update from a shaped rollout batch: advantages, full-batch token weights, mu passes
over micro-batches, ratio against the rollout's behaviour log-probs, one optimizer step per pass.

Departures from textbook GRPO, each a config knob: token weights come from the FULL batch before
micro-batching (the loss does not depend on the split); `algo.tis_cap > 0` adds truncated
importance sampling against the rollout engine (verl's TIS): the PPO/CISPO/GSPO ratio is then taken
against the trainer's own log-probs of the batch before the update, and every token's loss is
weighted by min(exp(trainer - rollout), C), which corrects for engines (vLLM, bf16, quantized)
that never match the trainer bit for bit; `algo.correction` generalizes it (sequence / geometric
weights, masking: rlx.algo.correction). The first pass also measures that mismatch
(`rollout/logprob_diff/*`, verl's rollout_probs_diff) at no extra forward.
"""

from __future__ import annotations

import math
from contextlib import contextmanager, nullcontext
import torch

from rlx.algo.advantages import compute_advantages
from rlx.algo.aggregation import token_weights
from rlx.algo.correction import correction_weights, mismatch_metrics, resolve
from rlx.algo.losses import policy_loss
from rlx.algo.shaping import mask_truncated
from rlx.device import autocast
from rlx.algo.micro_batches import batch_logprobs, forward_logprobs, micro_batches


class NonFiniteError(RuntimeError):
    pass


@contextmanager
def _adapters_off(policy):
    with policy.disable_adapter():
        yield policy


def update(policy, opt, sched, batch, rewards: torch.Tensor, cfg, *, trainer, step: int,
           train_noise=None, dp=None, ref_policy=None) -> tuple[dict, int]:
    """Train on `batch` (rows [N] with rewards [N]); returns (metrics, trained tokens).

    `ref_policy`: the frozen reference for the KL term (full fine-tuning keeps a copy); None = the
    policy itself with its LoRA adapters disabled.
    `dp` (rlx.distributed.DataParallel): on N ranks every rank holds the same global batch, computes
    the same advantages and token weights, and backpropagates only its share of the micro-batches;
    gradients and statistics are summed across ranks, so the step is the single-process one."""
    if dp is None:
        from rlx.distributed import DataParallel, World

        dp = DataParallel(policy, World())
    a = cfg.algo
    m: dict = {"train/num_sequences": len(batch)}
    if len(batch) == 0:
        return m, 0
    dev = trainer.device
    params = [p for p in policy.parameters() if p.requires_grad]
    group = torch.unique(batch.group, return_inverse=True)[1]  # contiguous prompt ids [N]
    adv = compute_advantages(rewards, group, a).to(dev)  # [N]
    mask = batch.loss_mask.float()  # [N, T] sampled completion tokens (a forced interruption phrase excluded)
    if a.mask_truncated:
        mask = mask_truncated(mask, batch.truncated)
    if batch.interrupted is not None and cfg.rollout.interrupt.mask_interrupted:
        mask = mask_truncated(mask, batch.interrupted)
    weights = token_weights(mask, group, a, cfg.rollout.max_new_tokens).to(dev)  # [N, T] FULL-batch normalizers
    mask = mask.to(dev)
    rollout_logp = batch.logprobs.to(dev)  # [N, T] behaviour log-probs from the engine
    temp, fp32_head = cfg.rollout.temperature, a.fp32_lm_head
    chunk = a.logprob_chunk
    corr = resolve(a)  # None = no rollout correction (algo.tis_cap > 0 = token truncate)
    # rows whose loss term is 0 whatever the policy (zero advantage and no KL: a zero-variance group) need
    # no backward; they are binned apart either way (N ranks split the batch as one process does), and
    # skipped only in one process (DDP's ranks must run the same backwards)
    frozen = (adv == 0).cpu() if a.forward_only_zero_adv and a.beta == 0 else None
    skip_frozen = not dp.world.distributed
    micro = dp.assign(micro_batches(batch, a, dev, need=batch.loss_mask, frozen=frozen))  # this rank's (mb, live)
    ref = None
    if a.beta > 0:  # reference = a frozen copy, or the same model with adapters disabled
        ref_ctx = nullcontext(ref_policy) if ref_policy is not None else _adapters_off(policy)
        with ref_ctx as ref_model, autocast(trainer):
            ref = batch_logprobs(ref_model, [mb for mb, _ in micro], rollout_logp, temp, fp32_head, chunk)  # [N, T]
    want_entropy = batch.entropy is None  # engines that do not return entropies (vLLM)
    first_logp = torch.zeros_like(rollout_logp)  # [N, T] trainer log-probs before the update
    entropy = torch.zeros_like(rollout_logp) if want_entropy else None
    agg: dict[str, float] = {}
    trained_tokens = 0
    tok_total = 0.0
    policy.train()
    for epoch in range(a.mu):
        opt.zero_grad(set_to_none=True)
        tok_total = 0.0
        for i, (mb, live) in enumerate(micro):
            r, t = mb.rows, slice(0, mb.T)  # this micro-batch's rows and completion columns
            noisy = train_noise.applied(policy, step) if train_noise is not None else nullcontext()
            with noisy, dp.sync_after(last=i == len(micro) - 1):  # noise restored only after backward
                backward = mb.grad or not skip_frozen
                with autocast(trainer), (nullcontext() if backward else torch.no_grad()):
                    out = forward_logprobs(policy, mb, temp, fp32_head, chunk,
                                           with_entropy=want_entropy and epoch == 0, decoder=dp.decoder)
                logp, ent = out if isinstance(out, tuple) else (out, None)
                logp = logp.float()
                if not live:  # a rank with fewer micro-batches: same collectives, zero gradient
                    (logp.sum() * 0.0).backward()
                    continue
                is_weight = None
                if epoch == 0:
                    first_logp[r, t] = logp.detach()
                    if ent is not None:
                        entropy[r, t] = ent
                if corr is not None:  # ratio vs the trainer's pre-update log-probs, weight vs the rollout's
                    # whole rows: a sequence-level weight sees its row's every token (filled just above in pass 0)
                    is_weight = correction_weights(first_logp[r, t], rollout_logp[r, t], mask[r, t], corr).weight
                    old_s = first_logp[r, t]
                else:  # ratio against the behaviour policy (PPO-off-policy style for mu > 1)
                    old_s = rollout_logp[r, t]
                loss, lm = policy_loss(logp, old_s, adv[r], weights[r, t], mask[r, t], a,
                                       ref_logp=ref[r, t] if ref is not None else None, is_weight=is_weight)
                if not torch.isfinite(loss):
                    raise NonFiniteError(f"non-finite loss ({loss.item()}) at step {step}; update refused, "
                                         "last checkpoint left intact")
                if backward:  # a forward-only micro-batch's loss is 0: nothing to backpropagate
                    (loss * dp.loss_scale).backward()
            ntok = float(mask[r, t].sum())
            tok_total += ntok
            for k, v in lm.items():  # token-weighted mean over micro-batches (max for */max)
                agg[k] = max(agg.get(k, -math.inf), v) if k.endswith("/max") else agg.get(k, 0.0) + v * ntok
            agg["actor/loss"] = agg.get("actor/loss", 0.0) + loss.item() * ntok
        for q in params:  # every micro-batch forward-only: zero gradients, so AdamW still steps (momentum, decay)
            if q.grad is None:
                q.grad = torch.zeros_like(q)
        dp.reduce_grads()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, a.grad_clip)
        if not torch.isfinite(grad_norm):
            raise NonFiniteError(f"non-finite gradient norm at step {step}; update refused, last checkpoint left intact")
        opt.step()
        sched.step()
        trained_tokens += int(mask.sum())
    policy.eval()
    sums, maxes = dp.reduce_stats({k: v for k, v in agg.items() if not k.endswith("/max")} | {"_tok": tok_total},
                                  {k: v for k, v in agg.items() if k.endswith("/max")})
    tok_total = sums.pop("_tok")  # the last pass's tokens, all ranks
    n_upd = a.mu * max(tok_total, 1.0)
    for k, v in {**sums, **maxes}.items():
        m[k] = v if k.endswith("/max") else v / n_upd
    m["actor/grad_norm"] = grad_norm.item()
    m["actor/lr"] = sched.get_last_lr()[0]
    if dp.world.distributed:  # each rank filled its own rows; zeros elsewhere
        dp.world.all_reduce(first_logp)
        if entropy is not None:
            dp.world.all_reduce(entropy)
    cmask = batch.loss_mask.to(dev)
    m.update(mismatch_metrics(first_logp, rollout_logp, cmask, corr))  # every step: |diff|, KL, quantiles, weights
    if entropy is not None:
        m["actor/entropy"] = ((entropy * cmask).sum() / cmask.sum().clamp(min=1)).item()
    return m, trained_tokens
