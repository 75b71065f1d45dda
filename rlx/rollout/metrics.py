"""The metrics of one step's rollout batch: rewards, pass rate, lengths, staleness, entropy, and the hack
tripwires (rlx.tasks.tripwires) when the step's examples are given."""

from __future__ import annotations

from rlx.algo import zero_variance_groups
from rlx.tasks.tripwires import tripwire_metrics


def rollout_metrics(task, batch, rewards, per_fn, passed, step: int, G: int, examples: list | None = None) -> dict:
    """`examples`: the step's prompts (`batch.group[i]` indexes the one row i answers); with them the
    tripwires train/hack/* and train/format/hash_line are measured on `batch.texts` and the shaped rewards."""
    zero_var = zero_variance_groups(rewards, batch.group)  # [N] bool
    m = {"train/frac_reward_zero_std": zero_var.float().view(-1, G)[:, 0].mean().item(),
         "train/reward/mean": rewards.mean().item(),
         "train/reward/std": rewards.std().item() if len(rewards) > 1 else 0.0,
         **task.reward_metrics(per_fn),
         "train/pass_rate": passed.mean().item(),
         "response_length/mean": batch.lengths.float().mean().item(),
         "response_length/clip_ratio": batch.truncated.float().mean().item()}
    if batch.version is not None:  # policy versions behind the one this step updates (0 = on-policy)
        lag = (step - 1) - batch.version  # [N], the row's oldest token
        m["rollout/staleness/mean"], m["rollout/staleness/max"] = lag.float().mean().item(), int(lag.max())
    if batch.interrupted is not None:
        m["response_length/interrupt_ratio"] = batch.interrupted.float().mean().item()
    if batch.entropy is not None:  # engines that return entropies (hf); otherwise the update measures it
        m["actor/entropy"] = ((batch.entropy * batch.completion_mask).sum() / batch.completion_mask.sum()).item()
    if examples is not None:
        m.update(tripwire_metrics(list(batch.texts), [examples[i] for i in batch.group.tolist()], rewards.tolist()))
    return m
