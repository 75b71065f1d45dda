"""GSM8K- / MATH-style datasets from local JSON-lines files (through HF `datasets`), scored with math-verify."""

from __future__ import annotations

import re
from pathlib import Path

from rlx.tasks.base import Example, Task


def _load_split(path: str, cfg) -> list[Example]:
    from datasets import load_dataset

    if not path:
        raise ValueError("task=jsonl needs task.train_path and task.eval_path (local .jsonl files)")
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"task: data file not found: {p}")
    ds = load_dataset("json", data_files=str(p), split="train")
    for f in (cfg.question_field, cfg.answer_field):
        if f not in ds.column_names:
            raise ValueError(f"task: field '{f}' not in {p} (columns: {ds.column_names})")
    pattern = re.compile(cfg.answer_regex, re.S) if cfg.answer_regex else None
    out = []
    for i, row in enumerate(ds):
        raw = str(row[cfg.answer_field])
        answer = raw
        if pattern is not None:
            m = pattern.search(raw)
            if m is None:
                raise ValueError(f"task: answer_regex {cfg.answer_regex!r} does not match row {i} of {p}")
            answer = m.group(1).strip()
        q = str(row[cfg.question_field])
        out.append(Example(key=f"{p.name}:{i}", prompt=cfg.prompt_template.format(question=q), answer=answer, solution=raw))
    return out


class JsonlTask(Task):
    name = "jsonl"

    def __init__(self, cfg):
        super().__init__(cfg)
        self.train = _load_split(cfg.train_path, cfg)
        self.eval = _load_split(cfg.eval_path, cfg)
        if cfg.n_train:
            self.train = self.train[: cfg.n_train]
        if cfg.n_eval:
            self.eval = self.eval[: cfg.n_eval]
