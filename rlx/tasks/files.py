"""Datasets as users hold them: local .jsonl / .json / .parquet / .csv files or a directory written by
HF `datasets`' `save_to_disk`, read into Examples through a column mapping.

`task.question_field` names the prompt column: a string (formatted with `task.prompt_template`) or a
chat `messages` list ([{"role": "user", "content": ...}, ...]), which the model's tokenizer renders
with its chat template (`Task.render_chat`, called before the model is built). `task.answer_field`
names the gold answer (optionally cut out with `task.answer_regex`). Every column but the prompt
goes to import-path reward functions as a keyword argument (rlx.tasks.user_rewards).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from rlx.tasks.base import Example, Task

FORMATS = (".jsonl", ".json", ".parquet", ".csv")


def _read_jsonl(path: Path) -> list[dict]:
    """One JSON object per non-empty line; a malformed line is refused naming the file and line."""
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
    return rows


def _read_json(path: Path) -> list[dict]:
    """A JSON array of objects."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"task: {path} is not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise ValueError(f"task: {path} must hold a JSON array of objects (one per row); for one object per "
                         f"line use a .jsonl file")
    return data


def _read_parquet(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()  # plain Python values (lists of dicts stay lists of dicts)


def _read_csv(path: Path) -> list[dict]:
    """Every value a string, as written (no type guessing, no NaN for empty cells)."""
    import csv

    with path.open(newline="", encoding="utf-8") as f:
        return [dict(r) for r in csv.DictReader(f)]


def _read_saved_dataset(path: Path) -> list[dict]:
    """A `datasets.Dataset.save_to_disk` directory (one split)."""
    from datasets import Dataset, DatasetDict, load_from_disk

    ds = load_from_disk(str(path))
    if isinstance(ds, DatasetDict):
        raise ValueError(f"task: {path} holds a DatasetDict with splits {sorted(ds)}; point the path at one split's "
                         f"directory, e.g. {path / sorted(ds)[0]}")
    assert isinstance(ds, Dataset)
    return ds.to_list()


READERS = {".jsonl": _read_jsonl, ".json": _read_json, ".parquet": _read_parquet, ".csv": _read_csv}


def read_rows(path: str | Path) -> list[dict]:
    """The rows of a local data file or saved `datasets` directory, as dicts (refused with the reason)."""
    p = Path(path).expanduser()
    if p.is_dir():
        if not (p / "dataset_info.json").is_file() and not (p / "dataset_dict.json").is_file():
            raise ValueError(f"task: {p} is a directory but not one written by datasets' save_to_disk "
                             f"(no dataset_info.json / dataset_dict.json)")
        rows = _read_saved_dataset(p)
    elif not p.is_file():
        raise FileNotFoundError(f"task: data file not found: {p}")
    elif p.suffix.lower() not in READERS:
        raise ValueError(f"task: {p}: unsupported format '{p.suffix}'; use one of {list(FORMATS)} or a "
                         f"datasets save_to_disk directory")
    else:
        rows = READERS[p.suffix.lower()](p)
    if not rows:
        raise ValueError(f"task: {p} has no rows")
    return rows


def _messages(value, where: str) -> list[dict] | None:
    """A chat prompt as a list of {role, content} dicts; None if `value` is a plain string prompt."""
    if isinstance(value, str):
        return None
    ok = isinstance(value, (list, tuple)) and value and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value)
    if not ok:
        raise ValueError(f"task: {where} is neither a string nor a chat messages list "
                         f"[{{'role': ..., 'content': ...}}, ...]; got {str(value)[:120]!r}")
    return [{"role": m["role"], "content": m["content"]} for m in value]


def load_split(path: str | None, spec, what: str = "task.train_path") -> list[Example]:
    """Examples of one split. `spec` carries question_field, answer_field, answer_regex, prompt_template."""
    if not path:
        raise ValueError(f"{what} is not set: a file task needs task.train_path and task.eval_path "
                         f"(local {'/'.join(FORMATS)} files or a datasets save_to_disk directory)")
    p = Path(path).expanduser()
    rows = read_rows(p)
    for f, key in ((spec.question_field, "question_field"), (spec.answer_field, "answer_field")):
        missing = next((i for i, row in enumerate(rows) if f not in row), None)
        if missing is not None:
            raise ValueError(f"task.{key}: column '{f}' is not in row {missing} of {p} "
                             f"(its columns: {sorted(rows[missing])})")
    pattern = re.compile(spec.answer_regex, re.S) if spec.answer_regex else None
    out = []
    for i, row in enumerate(rows):
        raw = str(row[spec.answer_field])
        answer = raw
        if pattern is not None:
            m = pattern.search(raw)
            if m is None:
                raise ValueError(f"task.answer_regex {spec.answer_regex!r} does not match row {i} of {p}")
            answer = m.group(1).strip()
        q = row[spec.question_field]
        messages = _messages(q, f"column '{spec.question_field}' of row {i} of {p}")
        prompt = "" if messages is not None else spec.prompt_template.format(question=q)  # chat: rendered later
        columns = {k: v for k, v in row.items() if k != spec.question_field}
        out.append(Example(key=f"{p.name}:{i}", prompt=prompt, answer=answer, solution=raw, columns=columns,
                           messages=messages))
    return out


class FileTask(Task):
    """Train and held-out splits from local files (`task.name: file`; `jsonl` is the same task)."""

    name = "file"

    def __init__(self, cfg):
        super().__init__(cfg)
        self.train = load_split(cfg.train_path, cfg, "task.train_path")
        self.eval = load_split(cfg.eval_path, cfg, "task.eval_path")
        if cfg.n_train:
            self.train = self.train[: cfg.n_train]
        if cfg.n_eval:
            self.eval = self.eval[: cfg.n_eval]
