"""One RL step's samples as rlx.train takes them: generated (skipping prompts the curriculum retired), scored,
and refilled for dynamic sampling."""

from __future__ import annotations

import torch


def score(task, examples, batch):
    """(per reward function, total [N] with an environment's rewards, the task's pass flags [N])."""
    rows = [examples[i] for i in batch.group.tolist()]
    # [N]: the rows the token budget stopped (a cut text's last line is no stated answer: rlx.tasks.stated)
    per_fn = (task.score(rows, batch.texts) if batch.truncated is None
              else task.score(rows, batch.texts, batch.truncated.tolist()))
    rewards = torch.tensor(task.total_reward(per_fn), dtype=torch.float32)  # [N]
    if batch.env_reward is not None:
        rewards = rewards + batch.env_reward.float()
    passed = torch.tensor(task.passed(per_fn), dtype=torch.float32)  # [N]
    return per_fn, rewards, passed


def generate(schedule, policy, curriculum, n: int, step: int, metrics: dict | None = None):
    """n prompts' groups from the rollout schedule, skipping prompts ScaleRL's curriculum retired."""
    skip = curriculum.is_retired if curriculum is not None else None
    return schedule.generate(policy, n, step, skip=skip, metrics=metrics)


def refill(schedule, policy, curriculum, task, shaping, step: int, consumed: list, n: int):
    """Dynamic sampling's fresh groups: n more prompts generated and scored; their examples join `consumed`."""
    examples, batch = generate(schedule, policy, curriculum, n, step)
    consumed += examples
    return batch, shaping.rewards(batch, score(task, examples, batch)[1])
