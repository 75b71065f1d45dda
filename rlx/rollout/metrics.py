"""One step's rollout metrics (rewards, lengths, staleness, entropy, hack tripwires) and SignalMonitor, the warning
when the sampled groups have stopped carrying a learning signal."""

from __future__ import annotations

from rlx.algo import zero_variance_groups
from rlx.tasks.tripwires import tripwire_metrics


def rollout_metrics(task, batch, rewards, per_fn, passed, step: int, G: int, examples: list | None = None) -> dict:
    """`examples`: the step's prompts (indexed by `batch.group`); with them the hack tripwires are measured too."""
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


class SignalMonitor:
    """`update` returns a `[warn]` line once per streak of `patience` steps (0: never) whose groups all had equal
    rewards, so no gradient (docs/rewards.md, "No learning signal"); dynamic-sampling refills count."""

    def __init__(self, patience: int):
        self.patience, self.streak, self.armed, self.last_rate = patience, 0, True, None

    @classmethod
    def for_run(cls, run_dir, start_step: int, **kwargs) -> "SignalMonitor":
        """A monitor replayed from metrics.jsonl: a resume neither restarts a streak nor repeats a warning."""
        from rlx.run.records import logged_steps

        mon = cls(**kwargs)
        for step, row in logged_steps(run_dir, start_step):
            mon.update(step, row)
        return mon

    def update(self, step: int, metrics: dict) -> list[str]:
        frac = metrics.get("train/frac_reward_zero_std")
        if frac is None:  # not a training row (an evaluation's)
            return []
        if frac < 1.0 or (metrics.get("train/dynamic_sampling/refilled_groups") or 0) > 0:
            self.streak, self.armed = 0, True
            return []
        self.streak += 1
        self.last_rate = metrics.get("train/reward/mean")
        if not (self.patience and self.armed and self.streak >= self.patience):
            return []
        self.armed = False
        state = ("every sample failed" if self.last_rate == 0 else "every sample passed" if self.last_rate == 1
                 else "each group's samples were rewarded alike")
        return [f"[warn] step {step}: no sampled group has had differing rewards for {self.streak} steps in a row "
                f"({state} at step {step}): every group-relative advantage is 0, so the reward gives the policy no "
                f"gradient and it cannot recover by itself (a collapse such as repetition loops, a task too hard or "
                f"too easy, or a token budget too small); read completions.jsonl and docs/rewards.md, "
                f"'No learning signal'"]
