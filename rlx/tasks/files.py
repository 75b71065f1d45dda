"""Datasets as users hold them (local .jsonl / .json / .parquet / .csv files or a `datasets` save_to_disk
directory) read into Examples through a column mapping, and task.holdout's carved split (docs/data.md).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from rlx.tasks.base import Example, Task

FORMATS = (".jsonl", ".json", ".parquet", ".csv")
EVAL_SET_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")  # becomes part of a metric key: val/<name>/acc


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
        where = "" if p.is_absolute() else f" (= {p.resolve()}, relative to the working directory)"
        raise FileNotFoundError(f"task: data file not found: {p}{where}")
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


def _checked_rows(path: str | None, spec, what: str) -> tuple[Path, list[dict]]:
    """The rows of one split's file, each holding the question and answer columns (else: which row lacks which)."""
    if not path:
        raise ValueError(f"{what} is not set: a file task needs task.train_path and task.eval_path "
                         f"(local {'/'.join(FORMATS)} files or a datasets save_to_disk directory), or "
                         f"task.train_path and task.holdout")
    p = Path(path).expanduser()
    rows = read_rows(p)
    for f, key in ((spec.question_field, "question_field"), (spec.answer_field, "answer_field")):
        missing = next((i for i, row in enumerate(rows) if f not in row), None)
        if missing is not None:
            raise ValueError(f"task.{key}: column '{f}' is not in row {missing} of {p} "
                             f"(its columns: {sorted(rows[missing])})")
    return p, rows


def _examples(p: Path, indexed: list[tuple[int, dict]], spec) -> list[Example]:
    """(row index in the file, row) pairs -> Examples keyed `<file name>:<row index>`."""
    pattern = re.compile(spec.answer_regex, re.S) if spec.answer_regex else None
    out = []
    for i, row in indexed:
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


def check_paths(cfg) -> None:
    """A file task's data files exist and task.holdout fits its other keys (checked before any file is read)."""
    holdout = getattr(cfg, "holdout", 0)
    if holdout < 0:
        raise ValueError(f"task.holdout must be >= 0 (0 = the held-out split is task.eval_path), got {holdout}")
    if holdout and cfg.eval_path:
        raise ValueError(f"task.holdout={holdout} carves the held-out split out of task.train_path, but "
                         f"task.eval_path is set too ({cfg.eval_path}); set task.eval_path=null or task.holdout=0")
    if holdout and cfg.n_eval > holdout:
        raise ValueError(f"task.n_eval={cfg.n_eval} exceeds task.holdout={holdout}, the held-out questions carved "
                         f"out of task.train_path")
    paths = {"task.train_path": cfg.train_path, **({} if holdout else {"task.eval_path": cfg.eval_path})}
    paths.update({f"task.eval.{name}.path": spec.path for name, spec in (getattr(cfg, "eval", None) or {}).items() if spec.path})
    for key, path in paths.items():
        if not path:
            raise ValueError(f"{key} is not set: a file task needs task.train_path and task.eval_path (local "
                             f"{'/'.join(FORMATS)} files or a datasets save_to_disk directory), or task.train_path "
                             f"and task.holdout")
        p = Path(path).expanduser()
        if not p.exists():
            where = "" if p.is_absolute() else f" (= {p.resolve()}, relative to the working directory)"
            raise FileNotFoundError(f"{key}: data file not found: {p}{where}")


def load_split(path: str | None, spec, what: str = "task.train_path") -> list[Example]:
    """Examples of one split. `spec` carries question_field, answer_field, answer_regex, prompt_template."""
    p, rows = _checked_rows(path, spec, what)
    return _examples(p, list(enumerate(rows)), spec)


@dataclass
class _Fields:
    """The column mapping of one eval set (task.eval.<name>, unset keys taken from task.*)."""

    question_field: str
    answer_field: str
    answer_regex: str | None
    prompt_template: str


def load_eval_sets(task: Task) -> None:
    """task.eval {name: {path, n, ...}} -> task.eval_sets and task.eval; empty: one set, the held-out split."""
    if not task.named_eval:
        task.eval_sets = {"default": task.eval}
        return
    own, sets = task.eval, {}
    for name, spec in task.cfg.eval.items():
        if not EVAL_SET_NAME.match(name):
            raise ValueError(f"task.eval: set name '{name}' must match {EVAL_SET_NAME.pattern} (it becomes "
                             f"the metric key val/<name>/acc)")
        if spec.n < 0:
            raise ValueError(f"task.eval.{name}.n must be >= 0 (0 = every row), got {spec.n}")
        if spec.path is None:
            examples = own
        else:
            fields = {k: spec[k] if spec[k] is not None else task.cfg.get(k)
                      for k in ("question_field", "answer_field", "answer_regex", "prompt_template")}
            examples = load_split(spec.path, _Fields(**fields), f"task.eval.{name}.path")
        sets[name] = examples[: spec.n] if spec.n else examples
    task.eval_sets = sets
    task.eval = [e for examples in sets.values() for e in examples]


def question_text(q) -> str:
    """What identifies a question: a string with its whitespace runs collapsed, or chat messages as canonical JSON."""
    if isinstance(q, str):
        return " ".join(q.split())
    return json.dumps(q, sort_keys=True, ensure_ascii=False)


def holdout_rank(text: str, seed: int) -> str:
    """The question's place in the held-out order, from the seed and its text alone (not the file's order)."""
    return hashlib.sha256(f"{seed}:{text}".encode("utf-8")).hexdigest()


def carve_holdout(path: str | None, spec, n: int, seed: int) -> tuple[list[Example], list[Example]]:
    """(train, held-out) from one file: the first row of each of the `n` distinct questions of smallest
    `holdout_rank`, in rank order (a smaller n_eval nests), and every row of the other questions, in file order."""
    p, rows = _checked_rows(path, spec, "task.train_path")
    first: dict[str, int] = {}  # question text -> its first row
    for i, row in enumerate(rows):
        first.setdefault(question_text(row[spec.question_field]), i)
    if not 0 < n < len(first):
        raise ValueError(f"task.holdout={n} must be in [1, {len(first) - 1}]: {p} has {len(first)} distinct "
                         f"questions and training needs at least one")
    held = held_slice(first, n, seed)
    held_set = set(held)
    train = [(i, row) for i, row in enumerate(rows) if question_text(row[spec.question_field]) not in held_set]
    return _examples(p, train, spec), _examples(p, [(first[t], rows[first[t]]) for t in held], spec)


def held_slice(texts, n: int, seed: int) -> list[str]:
    """The `n` question texts of smallest `holdout_rank`, in rank order: task.holdout's slice."""
    return sorted(texts, key=lambda t: holdout_rank(t, seed))[:n]


def held_out_questions(cfg) -> set[str]:
    """`question_text` of every question a file task holds out (the whole task.holdout slice, or task.eval_path,
    and each task.eval.<name>.path): what an SFT stage must never train on (rlx.models.sft)."""
    texts: set[str] = set()
    if cfg.get("holdout", 0):
        _, rows = _checked_rows(cfg.train_path, cfg, "task.train_path")
        texts |= set(held_slice({question_text(r[cfg.question_field]) for r in rows}, cfg.holdout, cfg.seed))
    elif cfg.eval_path:
        _, rows = _checked_rows(cfg.eval_path, cfg, "task.eval_path")
        texts |= {question_text(r[cfg.question_field]) for r in rows}
    for spec in (cfg.get("eval") or {}).values():
        if spec.path:
            field = spec.question_field or cfg.question_field
            texts |= {question_text(r[field]) for r in read_rows(spec.path) if field in r}
    return texts


class FileTask(Task):
    """Train and held-out splits from local files (`task.name: file`), or both from one with `task.holdout`."""

    name = "file"

    def __init__(self, cfg):
        super().__init__(cfg)
        check_paths(cfg)
        if cfg.get("holdout", 0):
            self.train, self.eval = carve_holdout(cfg.train_path, cfg, cfg.holdout, cfg.seed)
        else:
            self.train = load_split(cfg.train_path, cfg, "task.train_path")
            self.eval = load_split(cfg.eval_path, cfg, "task.eval_path")
        if cfg.n_train:
            self.train = self.train[: cfg.n_train]
        if cfg.n_eval:
            self.eval = self.eval[: cfg.n_eval]
