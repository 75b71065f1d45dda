"""Tasks: synthetic generators and local-file datasets, chosen by `task.name`."""

from rlx.tasks.base import Example, Task
from rlx.tasks.files import FileTask, check_paths, load_eval_sets
from rlx.tasks.rewards import REWARDS, register_reward
from rlx.tasks.synthetic import Arith, KeyedRules, Multiply
from rlx.tasks.user_rewards import check_reward_specs
from rlx.tasks.wordproblems import WordProblems

TASKS = {"arith": Arith, "multiply": Multiply, "rules": KeyedRules, "wordproblems": WordProblems, "file": FileTask}
FILE_TASKS = ("file",)


def check_task_config(cfg) -> None:
    """What can be checked of task.* before any model, without reading data: the name, every reward entry,
    task.holdout (file tasks only) and a file task's paths."""
    if cfg.name == "jsonl":
        raise ValueError("task.name=jsonl: the file task is named 'file' now (task.name=file, or task=gsm8k / task=math)")
    if cfg.name not in TASKS:
        raise ValueError(f"task.name: unknown task '{cfg.name}'; registered: {sorted(TASKS)}")
    check_reward_specs(cfg.rewards)
    holdout = getattr(cfg, "holdout", 0)
    if holdout and cfg.name not in FILE_TASKS:  # nothing else reads it: refused, not silently ignored
        raise ValueError(f"task.holdout={holdout} carves a file task's held-out split out of task.train_path, but "
                         f"task.name={cfg.name} generates its own held-out split (task.n_eval={cfg.n_eval}); set "
                         f"task.holdout=0, or use a file task (task.name=file)")
    if cfg.name in FILE_TASKS:
        check_paths(cfg)  # the data files exist (not read yet), task.holdout fits task.eval_path / task.n_eval


def build_task(cfg) -> Task:
    """The task with its splits and eval sets loaded and checked against the reward functions' columns."""
    check_task_config(cfg)
    task = TASKS[cfg.name](cfg)
    load_eval_sets(task)
    task.check_columns()
    return task


__all__ = ["Example", "Task", "TASKS", "FILE_TASKS", "REWARDS", "register_reward", "build_task", "check_task_config"]
