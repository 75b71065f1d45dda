"""The mismatch split (`algo.mismatch_split_every`): where the trainer-vs-engine log-ratio comes from.

For a token sampled under version v, trainer at c: engine = log pi_v - log mu_v, staleness = log pi_c - log pi_v,
total = their sum (docs/engine.md, The split); pi_v uses version v's adapter, kept by the schedule (`versions()`)."""

from __future__ import annotations

import torch
from torch import Tensor

from rlx.algo.correction import k3
from rlx.algo.micro_batches import batch_logprobs, micro_batches
from rlx.run.device import autocast

PARTS = ("engine", "staleness", "total")


class MissingVersions(LookupError):
    """A producing version's weights are not kept (an async run resumed: its queue's versions are not checkpointed)."""


@torch.no_grad()
def trainer_logprobs(policy, batch, cfg, trainer) -> Tensor:
    """The trainer's log-probs of the batch's completion tokens, micro-batched as the update does.  # [N, T]"""
    a, dev = cfg.algo, trainer.device
    with autocast(trainer):
        return batch_logprobs(policy, micro_batches(batch, a, dev, need=batch.loss_mask), batch.logprobs.to(dev).float(),
                              cfg.rollout.temperature, a.fp32_lm_head, a.logprob_chunk)


def producing_versions(batch, current: int) -> Tensor:
    """The weights version that sampled each token (-1 on padding): the engine's record, else current.  # [N, T]"""
    if batch.token_version is not None:
        return batch.token_version
    if batch.version is not None:
        return batch.version.unsqueeze(-1).expand_as(batch.logprobs)
    return torch.full(batch.logprobs.shape, current, dtype=torch.long)


def split_parts(policy, batch, cfg, trainer, current: int, versions: dict[int, dict]) -> dict[str, Tensor]:
    """{engine, staleness, total} log-ratios per token (0 off the completion).  # [N, T] each"""
    from rlx.models.trainable import load_trainable, trainable_state

    dev = trainer.device
    valid = batch.loss_mask.to(dev) > 0  # [N, T]
    tver = producing_versions(batch, current).to(dev)  # [N, T]
    needed = sorted({int(v) for v in tver[valid].tolist()} - {current})
    missing = [v for v in needed if v not in versions]
    if missing:
        raise MissingVersions(f"algo.mismatch_split_every: the weights of versions {missing} that sampled this batch "
                              f"are not kept (kept: {sorted(versions)}); the trainer is at version {current}")
    now = trainer_logprobs(policy, batch, cfg, trainer)  # [N, T] pi_c
    produced = now.clone()  # [N, T] pi_v, token by token
    if needed:
        saved = trainable_state(policy)
        try:
            for v in needed:
                load_trainable(policy, versions[v])
                sel = valid & (tver == v)
                produced[sel] = trainer_logprobs(policy, batch, cfg, trainer)[sel]
        finally:
            load_trainable(policy, saved)
    mu = batch.logprobs.to(dev).float()
    zero = torch.zeros_like(now)
    return {"engine": torch.where(valid, produced - mu, zero), "staleness": torch.where(valid, now - produced, zero),
            "total": torch.where(valid, now - mu, zero)}


def mismatch_split(policy, batch, cfg, trainer, current: int, versions: dict[int, dict]) -> dict[str, float]:
    """The split's metrics: mean |log-ratio| and KL (k1 and k3 from the engine's samples) of each part."""
    try:
        parts = split_parts(policy, batch, cfg, trainer, current, versions)
    except MissingVersions:  # a diagnostic: the run goes on, the step says so
        return {"rollout_corr/split/missing_versions": 1.0}
    valid = batch.loss_mask.to(trainer.device) > 0
    if not bool(valid.any()):
        return {}
    m = {}
    for name in PARTS:
        d = parts[name][valid]  # [n_tok] log of the part's ratio (numerator the later / trainer side)
        m[f"rollout_corr/split/{name}/abs_mean"] = float(d.abs().mean())
        m[f"rollout_corr/split/{name}/kl"] = float((-d.double()).mean())  # k1: the three add up like the log-ratios
        m[f"rollout_corr/split/{name}/k3_kl"] = float(k3(d).mean())
    return m
