"""GSM8K- / MATH-style datasets from local JSON-lines files, scored with math-verify."""

from __future__ import annotations

import re
from pathlib import Path

from rlx.tasks.base import Example, Task


def _read_jsonl(path: Path) -> list[dict]:
    """One JSON object per non-empty line; a malformed line is refused naming the file and line."""
    import json

    rows = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"task: {path} line {lineno} is not valid JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(row, dict):
                raise ValueError(f"task: {path} line {lineno} is not a JSON object")
            rows.append(row)
    if not rows:
        raise ValueError(f"task: {path} has no rows")
    return rows


def _load_split(path: str, cfg) -> list[Example]:
    if not path:
        raise ValueError("task=jsonl needs task.train_path and task.eval_path (local .jsonl files)")
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"task: data file not found: {p}")
    ds = _read_jsonl(p)
    for f in (cfg.question_field, cfg.answer_field):
        missing = next((i for i, row in enumerate(ds) if f not in row), None)
        if missing is not None:
            raise ValueError(f"task: field '{f}' not in row {missing} of {p} (its keys: {sorted(ds[missing])})")
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
