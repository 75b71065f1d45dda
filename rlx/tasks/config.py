"""The `task.*` schema (which task, its data and its rewards) and every check of a single task value, run when
rlx.config.preflight converts the composed node (`as_config`), before any model is built."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

@dataclass
class EvalSetConfig:
    """One named eval set (task.eval.<name>): its data and, where it differs from task.*, its columns."""

    path: Optional[str] = None  # data file / save_to_disk directory; null = the task's own held-out split
    n: int = 0  # first n rows (0 = all)
    question_field: Optional[str] = None  # null = task.question_field
    answer_field: Optional[str] = None  # null = task.answer_field
    answer_regex: Optional[str] = None  # null = task.answer_regex; "" = none
    prompt_template: Optional[str] = None  # null = task.prompt_template


@dataclass
class TaskConfig:
    """`name` is a registered task: arith | multiply | rules | wordproblems | file (jsonl is the file task's old name)."""

    name: str = field(default="arith", metadata={
        "help": "registered task: arith | multiply | rules | wordproblems | file (= jsonl; task=gsm8k / task=math are "
                "presets)"})
    seed: int = field(default=1234, metadata={"help": "data seed (independent from the run seed)"})
    n_train: int = field(default=2000, metadata={"help": "training problems (jsonl: first n rows, 0 = all)"})
    n_eval: int = field(default=200, metadata={"help": "held-out problems (jsonl: first n rows, 0 = all)"})
    # synthetic task knobs (each task reads the ones it needs)
    num_terms: int = field(default=3, metadata={"help": "arith: numbers per problem"})
    max_operand: int = field(default=20, metadata={
        "help": "arith: largest operand; wordproblems: largest start count and +/- amount"})
    digits: int = field(default=2, metadata={"help": "multiply: digits per factor"})
    steps: int = field(default=2, metadata={"help": "wordproblems: arithmetic steps per problem (difficulty, 1..8)"})
    num_keys: int = field(default=12, metadata={
        "help": "rules: keys, each with its own rule (copy, reverse, rotl, rotr, inc, dec)"})
    length: int = field(default=4, metadata={"help": "rules: digits per string"})
    demo_correct: float = field(default=0.02, metadata={
        "help": "rules: share of SFT demonstrations that apply the key's own rule"})
    default_rewards: dict[str, float] = field(default_factory=dict, metadata={
        "help": "the task file's reward set (task files set this, not `rewards`); used unless task.rewards is given"})
    rewards: dict[str, float] = field(default="${.default_rewards}", metadata={
        "help": "reward functions and their weights: registered names or import paths package.module:function (TRL's "
                "convention, docs/data.md); each is logged as train/rewards/<name>. Unset, it is the task file's "
                "default_rewards; `task.rewards={...}` REPLACES that set (assigned over this interpolation, not merged "
                "into the file's dict); task.rewards.<name>=w edits the task file's set"})
    answer_phrase: Optional[bool] = field(default=None, metadata={
        "help": "stated_answer: also read a numeric answer from 'the answer is N' or the final line's last number when "
                "the completion has neither a '#### N' line nor a \\boxed{N}; null = on for chat prompts "
                "(model.chat_prompts or chat messages), off otherwise (docs/rewards.md)"})
    readings: Optional[list[str]] = field(default=None, metadata={
        "help": "the benchmark's own readings that evaluation reports beside the task's verdict: strict-match, "
                "flexible-extract (lm-eval's GSM8K), math-verify (MATH's boxed reading); null = by the gold answers: "
                "all numbers -> GSM8K's two, else math-verify (docs/eval.md)"})
    reward_timeout_s: float = field(default=5.0, metadata={
        "help": "hard bound per reward call in a worker process (math_verify: per completion; an import-path function: "
                "per batch); past it the call scores 0 and is counted in train/reward_timeouts"})
    # file task: local .jsonl / .json / .parquet / .csv files or datasets save_to_disk directories
    train_path: Optional[str] = field(default=None, metadata={"help": "file: training split"})
    eval_path: Optional[str] = field(default=None, metadata={"help": "file: held-out split"})
    holdout: int = field(default=0, metadata={
        "help": "file: carve the held-out split out of train_path instead (eval_path null): the `holdout` distinct "
                "questions of smallest sha256(task.seed, question text), disjoint from train (docs/data.md); 0 = off"})
    question_field: str = field(default="question", metadata={
        "help": "file: column holding the prompt (a string, or chat messages)"})
    answer_field: str = field(default="answer", metadata={"help": "file: column holding the gold answer"})
    prompt_template: str = field(default="{question}", metadata={
        "help": "file: prompt text of a string prompt, {question} is replaced"})
    answer_regex: Optional[str] = field(default=None, metadata={
        "help": "extract the gold answer from the answer field (e.g. GSM8K '#### (.*)')"})
    eval: dict[str, EvalSetConfig] = field(default_factory=dict, metadata={
        "help": "named eval sets {name: {path, n, ...}}, logged as val/<name>/acc, val/<name>/mean_at_k and their mean "
                "as val/acc, val/mean_at_k; empty = one set, the held-out split, logged as val/acc only"})

    def check(self) -> None:
        """Not in __post_init__: the schema's default holds `rewards` unresolved; as_config checks the composed one."""
        from rlx.tasks import FILE_TASKS, check_task_config

        file_task, n_train, n_eval, timeout = self.name in FILE_TASKS, self.n_train, self.n_eval, self.reward_timeout_s
        for ok, key, why, value in (
                (file_task or n_train >= 1, "task.n_train", "must be >= 1 for a synthetic task", n_train),
                (file_task or n_eval >= 1, "task.n_eval", "must be >= 1 for a synthetic task (0 means all rows only "
                                                          "for file tasks)", n_eval),
                (n_train >= 0, "task.n_train", "must be >= 0", n_train),
                (n_eval >= 0, "task.n_eval", "must be >= 0", n_eval),
                (timeout > 0 and math.isfinite(timeout), "task.reward_timeout_s", "must be > 0", timeout)):
            if not ok:
                raise ValueError(f"{key} {why}; got {value!r}")
        if self.readings is not None:
            from rlx.tasks.answers.readings import READINGS

            bad = [r for r in self.readings if r not in READINGS]
            if bad:
                raise ValueError(f"task.readings: unknown reading(s) {bad}; known: {list(READINGS)} "
                                 f"(null: by the golds)")
        check_task_config(self)


def as_config(node) -> TaskConfig:
    """The composed `task` node as a TaskConfig, checked (its __post_init__)."""
    from omegaconf import OmegaConf

    task = node if isinstance(node, TaskConfig) else OmegaConf.to_object(node)
    task.check()
    return task
