"""Tasks: synthetic generators and local-file datasets, chosen by `task.name`."""

from rlx.tasks.base import Example, Task
from rlx.tasks.jsonl import JsonlTask
from rlx.tasks.rewards import REWARDS, register_reward
from rlx.tasks.synthetic import Arith, Multiply

TASKS = {"arith": Arith, "multiply": Multiply, "jsonl": JsonlTask}


def build_task(cfg) -> Task:
    if cfg.name not in TASKS:
        raise ValueError(f"task.name: unknown task '{cfg.name}'; registered: {sorted(TASKS)}")
    return TASKS[cfg.name](cfg)


__all__ = ["Example", "Task", "TASKS", "REWARDS", "register_reward", "build_task"]
