"""One policy update from a shaped rollout batch: advantages, full-batch token weights, mu passes over
micro-batches, ratio against the rollout's behaviour log-probs, one optimizer step per pass.

`Update` runs `prepare` -> `reference` -> `train_passes` -> `summarise`. Full-batch token weights make the loss
independent of the split; `algo.tis_cap` / `algo.correction` weight tokens against the engine (docs/engine.md)."""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch import Tensor

from rlx.algo.advantages import compute_advantages
from rlx.algo.aggregation import token_weights
from rlx.algo.config import AlgoConfig, CorrectionConfig, as_config
from rlx.algo.correction import correction_weights, mismatch_metrics, resolve
from rlx.algo.losses import policy_loss
from rlx.algo.micro_batches import MicroBatch, batch_logprobs, forward_logprobs, micro_batches
from rlx.algo.shaping import Shaped, mask_truncated
from rlx.quant.linear import held_dequantized
from rlx.run.device import autocast
from rlx.algo.data_parallel import DataParallel
from rlx.run.checkpoint import NonFiniteError
from rlx.run.distributed import World


@dataclass(eq=False)
class Prepared:
    """What every pass of one update reads, computed once from the batch (rows [N], columns [T])."""

    adv: Tensor  # [N] advantages, on the trainer device
    mask: Tensor  # [N, T] loss mask (sampled completion tokens; truncated / interrupted rows zeroed if asked)
    weights: Tensor  # [N, T] token weights normalized over the FULL batch
    rollout_logp: Tensor  # [N, T] behaviour log-probs from the engine
    micro: list[tuple[MicroBatch, bool]]  # this rank's (micro-batch, live) pairs
    corr: CorrectionConfig | None  # the rollout correction (algo.tis_cap > 0 = token truncate); None = off
    first_logp: Tensor  # [N, T] trainer log-probs before the update, filled by pass 0
    entropy: Tensor | None  # [N, T] filled by pass 0 where the engine returned no entropies (vLLM)
    ref: Tensor | None = None  # [N, T] the KL reference's log-probs (algo.beta > 0)


@dataclass(eq=False)
class Update:
    """A run's policy update, bound once at build; `update(policy, opt, shaped, dp, step)` per step."""

    algo: AlgoConfig
    temperature: float  # rollout.temperature: the log-probs are those of the sampling distribution
    max_new_tokens: int  # rollout.max_new_tokens (algo.aggregation=constant's normalizer)
    mask_interrupted: bool  # rollout.interrupt.mask_interrupted: interrupted rows leave the loss
    trainer: object  # rlx.run.device.DeviceSpec: device and autocast dtype
    sched: object  # the LR scheduler of the optimizer passed to each call (stepped once per pass)
    train_noise: object = None  # AQN in the training forward too (noise.apply_in_train_forward), else None
    ref_policy: torch.nn.Module | None = None  # the frozen KL reference (full fine-tuning); None = adapters disabled
    hold_packed_base: bool = True  # a packed (QeRL) base dequantized once per update, not at every forward

    @classmethod
    def from_config(cls, cfg, trainer, sched, train_noise=None, ref_policy=None, algo: AlgoConfig | None = None
                    ) -> Update:
        """From the composed config: its algo group (`algo`: already converted) and the rollout values it reads."""
        r = cfg.rollout
        return cls(algo if algo is not None else as_config(cfg.algo), r.temperature, r.max_new_tokens, r.interrupt.mask_interrupted,
                   trainer, sched, train_noise, ref_policy)

    def __call__(self, policy, opt, shaped: Shaped, dp: DataParallel | None, step: int) -> tuple[dict, int]:
        """Train on `shaped.batch` (rows [N], rewards [N]); returns (metrics, trained tokens). `dp` (None: one
        process): each rank backpropagates its share of the micro-batches, so the step is the single-process one."""
        dp = dp if dp is not None else DataParallel(policy, World())
        batch = shaped.batch
        m: dict = {"train/num_sequences": len(batch)}
        if len(batch) == 0:
            return m, 0
        prep = self.prepare(batch, shaped.rewards, dp)
        # the frozen packed base is dequantized once here, not at every micro-batch's forward (the same values)
        with held_dequantized(policy) if self.hold_packed_base else nullcontext():
            prep.ref = self.reference(policy, prep)
            policy.train()
            agg, tok_total, grad_norm, trained_tokens = self.train_passes(policy, opt, prep, dp, step)
            policy.eval()
        m.update(self.summarise(agg, tok_total, grad_norm, prep, batch, dp))
        return m, trained_tokens

    def prepare(self, batch, rewards: Tensor, dp: DataParallel) -> Prepared:
        """Advantages, the loss mask and full-batch token weights, and this rank's micro-batches."""
        a, dev = self.algo, self.trainer.device
        group = torch.unique(batch.group, return_inverse=True)[1]  # contiguous prompt ids [N]
        adv = compute_advantages(rewards, group, a).to(dev)  # [N]
        mask = batch.loss_mask.float()  # [N, T] sampled completion tokens (a forced interruption phrase excluded)
        if a.mask_truncated:
            mask = mask_truncated(mask, batch.truncated)
        if batch.interrupted is not None and self.mask_interrupted:
            mask = mask_truncated(mask, batch.interrupted)
        weights = token_weights(mask, group, a, self.max_new_tokens).to(dev)  # [N, T] FULL-batch normalizers
        rollout_logp = batch.logprobs.to(dev)  # [N, T] behaviour log-probs from the engine
        # rows whose loss term is 0 whatever the policy (zero advantage, no KL) need no backward: binned apart
        # either way (N ranks split as one process does), skipped only in one process (DDP runs every backward)
        frozen = (adv == 0).cpu() if a.forward_only_zero_adv and a.beta == 0 else None
        micro = dp.assign(micro_batches(batch, a, dev, need=batch.loss_mask, frozen=frozen))
        entropy = torch.zeros_like(rollout_logp) if batch.entropy is None else None
        return Prepared(adv, mask.to(dev), weights, rollout_logp, micro, resolve(a),
                        torch.zeros_like(rollout_logp), entropy)

    def reference(self, policy, prep: Prepared) -> Tensor | None:
        """The KL reference's log-probs [N, T] (frozen copy, or the policy with adapters off); None without KL."""
        a = self.algo
        if not a.beta > 0:
            return None
        ref_model = policy if self.ref_policy is None else self.ref_policy
        with nullcontext() if self.ref_policy is not None else policy.disable_adapter(), autocast(self.trainer):
            return batch_logprobs(ref_model, [mb for mb, _ in prep.micro], prep.rollout_logp, self.temperature,
                                  a.fp32_lm_head, a.logprob_chunk)

    def train_passes(self, policy, opt, prep: Prepared, dp: DataParallel, step: int):
        """algo.mu passes, one step each: (accumulators, this rank's last-pass tokens, grad norm, trained tokens)."""
        params = [p for p in policy.parameters() if p.requires_grad]
        agg: dict[str, float] = {}
        trained_tokens, tok_total, grad_norm = 0, 0.0, None
        for epoch in range(self.algo.mu):
            opt.zero_grad(set_to_none=True)
            tok_total = 0.0
            for i, (mb, live) in enumerate(prep.micro):
                tok_total += self._micro_step(policy, mb, live, i == len(prep.micro) - 1, epoch, prep, dp, step, agg)
            grad_norm = self._optimizer_step(params, opt, dp, step)
            trained_tokens += int(prep.mask.sum())
        return agg, tok_total, grad_norm, trained_tokens

    def _micro_step(self, policy, mb: MicroBatch, live: bool, last: bool, epoch: int, prep: Prepared,
                    dp: DataParallel, step: int, agg: dict) -> float:
        """Forward (and backward) of one micro-batch; adds its metrics to `agg`, returns its loss tokens."""
        a = self.algo
        noisy = self.train_noise.applied(policy, step) if self.train_noise is not None else nullcontext()
        with noisy, dp.sync_after(last=last):  # noise restored only after backward
            backward = mb.grad or dp.world.distributed  # one process skips forward-only micro-batches' backward
            with autocast(self.trainer), (nullcontext() if backward else torch.no_grad()):
                out = forward_logprobs(policy, mb, self.temperature, a.fp32_lm_head, a.logprob_chunk,
                                       with_entropy=prep.entropy is not None and epoch == 0, decoder=dp.decoder)
            logp, ent = out if isinstance(out, tuple) else (out, None)
            logp = logp.float()
            # a dead repeat (a rank with fewer micro-batches) only lends its graph: same collectives, zero gradient
            loss, lm = self._loss(logp, ent, mb, epoch, prep, step) if live else (logp.sum(), {})
            if backward:  # a forward-only micro-batch's loss is 0: nothing to backpropagate
                dp.backward(loss, live)
        if not live:
            return 0.0
        ntok = float(prep.mask[mb.rows, : mb.T].sum())
        for k, v in lm.items():  # token-weighted mean over micro-batches (max for */max)
            agg[k] = max(agg.get(k, -math.inf), v) if k.endswith("/max") else agg.get(k, 0.0) + v * ntok
        agg["actor/loss"] = agg.get("actor/loss", 0.0) + loss.item() * ntok
        return ntok

    def _loss(self, logp: Tensor, ent: Tensor | None, mb: MicroBatch, epoch: int, prep: Prepared, step: int):
        """The policy loss of one live micro-batch; pass 0 also records its pre-update log-probs and entropies."""
        r, t = mb.rows, slice(0, mb.T)  # this micro-batch's rows and completion columns
        is_weight = None
        if epoch == 0:
            prep.first_logp[r, t] = logp.detach()
            if ent is not None:
                prep.entropy[r, t] = ent
        if prep.corr is not None:  # ratio vs the trainer's pre-update log-probs, weight vs the rollout's
            # whole rows: a sequence-level weight sees its row's every token (filled just above in pass 0)
            is_weight = correction_weights(prep.first_logp[r, t], prep.rollout_logp[r, t], prep.mask[r, t],
                                           prep.corr).weight
            old_s = prep.first_logp[r, t]
        else:  # ratio against the behaviour policy (PPO-off-policy style for mu > 1)
            old_s = prep.rollout_logp[r, t]
        loss, lm = policy_loss(logp, old_s, prep.adv[r], prep.weights[r, t], prep.mask[r, t], self.algo,
                               ref_logp=prep.ref[r, t] if prep.ref is not None else None, is_weight=is_weight)
        if not torch.isfinite(loss):
            raise NonFiniteError(f"non-finite loss ({loss.item()}) at step {step}; update refused, "
                                 "last checkpoint left intact")
        return loss, lm

    def _optimizer_step(self, params: list, opt, dp: DataParallel, step: int) -> Tensor:
        """Reduce and clip the pass's gradients, then one optimizer and one LR-schedule step."""
        for q in params:  # every micro-batch forward-only: zero gradients, so AdamW still steps (momentum, decay)
            if q.grad is None:
                q.grad = torch.zeros_like(q)
        dp.reduce_grads()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.algo.grad_clip)
        if not torch.isfinite(grad_norm):
            raise NonFiniteError(f"non-finite gradient norm at step {step}; update refused, last checkpoint left intact")
        opt.step()
        self.sched.step()
        return grad_norm

    def summarise(self, agg: dict, tok_total: float, grad_norm: Tensor, prep: Prepared, batch,
                  dp: DataParallel) -> dict:
        """actor/* means over every rank's tokens and passes, the trainer-vs-engine mismatch, entropy."""
        sums, maxes = dp.reduce_stats({k: v for k, v in agg.items() if not k.endswith("/max")} | {"_tok": tok_total},
                                      {k: v for k, v in agg.items() if k.endswith("/max")})
        tok_total = sums.pop("_tok")  # the last pass's tokens, all ranks
        n_upd = self.algo.mu * max(tok_total, 1.0)
        m = {k: v if k.endswith("/max") else v / n_upd for k, v in {**sums, **maxes}.items()}
        m["actor/grad_norm"] = grad_norm.item()
        m["actor/lr"] = self.sched.get_last_lr()[0]
        if dp.world.distributed:  # each rank filled its own rows; zeros elsewhere
            dp.world.all_reduce(prep.first_logp)
            if prep.entropy is not None:
                dp.world.all_reduce(prep.entropy)
        cmask = batch.loss_mask.to(self.trainer.device)
        m.update(mismatch_metrics(prep.first_logp, prep.rollout_logp, cmask, prep.corr))
        if prep.entropy is not None:
            m["actor/entropy"] = ((prep.entropy * cmask).sum() / cmask.sum().clamp(min=1)).item()
        return m
