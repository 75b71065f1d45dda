"""The one reader of run directories and sweeps (metrics.jsonl, summary.json, the .hydra config and overrides):
reports, fits, benchmarks, resume and tests read runs through it. It imports nothing heavier than yaml."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

METRICS, SUMMARY, CONFIG, OVERRIDES = "metrics.jsonl", "summary.json", ".hydra/config.yaml", ".hydra/overrides.yaml"


class MetricsFileError(ValueError):
    """metrics.jsonl has an invalid line before its last one (data would be lost: never dropped silently)."""


def parse_metrics(path: Path, text: str | bytes | None = None, strict: bool = True,
                  key: str = "step") -> tuple[list[tuple[str, dict]], str | None]:
    """(line, row) of every row of a JSON-lines file (rows carry a whole number `key` >= 0), and a note of drops: a
    cut last line is dropped; another invalid one raises MetricsFileError (strict: resume) or is skipped."""
    path = Path(path)
    raw = path.read_bytes() if text is None else text if isinstance(text, bytes) else text.encode()
    lines = raw.split(b"\n")
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    rows, notes = [], []
    for i, ln in enumerate(lines):
        if not ln.strip():
            continue
        line, row, problem = _parse_row(ln, key)
        if problem is None:
            rows.append((line, row))
        elif i == last and row is _CUT:  # half written; a whole line with a bad step is refused like any other
            newline = "no newline" if i == len(lines) - 1 else "newline-terminated"
            notes.append(f"{path}: dropped an incomplete last line (line {i + 1}, {len(ln)} chars, {newline}; "
                         f"it {problem}) -- a write cut short by a kill or a full disk")
        elif not strict:
            notes.append(f"{path}: skipped line {i + 1} (it {problem})")
        else:
            raise MetricsFileError(f"{path}: line {i + 1} {problem}; only a last line may be incomplete -- "
                                   f"refusing to drop data, fix or remove that line")
    return rows, ("; ".join(notes) or None)


_CUT = object()  # _parse_row's row for a line that a cut-short write explains (bad UTF-8 or JSON)


def _parse_row(raw: bytes, key: str) -> tuple[str, object, str | None]:
    """(text, row, None) of one line, or (text, _CUT | None, what is wrong with it)."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return raw.decode("utf-8", errors="replace"), _CUT, f"is not valid UTF-8 (byte {e.start})"
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        return line, _CUT, f"is not valid JSON ({e.msg} at column {e.colno})"
    if not isinstance(row, dict) or key not in row:
        return line, None, f"is not a row (a JSON object with a {key})"
    v = row[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        shown = repr(v) if isinstance(v, float) else json.dumps(v)  # 1e400 reads as inf
        return line, None, f"has {key} {shown}, not a whole number >= 0"
    return line, row, None


def read_metrics(run_dir: str | Path) -> list[dict]:
    """Rows of RUN/metrics.jsonl (an incomplete last line, as a running or killed run leaves, is skipped)."""
    return [row for _, row in parse_metrics(Path(run_dir) / METRICS)[0]]


def logged_steps(run_dir: str | Path, upto: int) -> list[tuple[int, dict]]:
    """(step, row) for steps 1..upto of RUN/metrics.jsonl, the last row of each step: what a resume replays."""
    if upto <= 0 or not (Path(run_dir) / METRICS).is_file():
        return []
    rows = {int(row["step"]): row for row in read_metrics(run_dir) if 1 <= int(row["step"]) <= upto}
    return sorted(rows.items())


def flatten(tree: dict, prefix: str = "") -> dict:
    """{"algo": {"name": "grpo"}} -> {"algo.name": "grpo"}; lists become tuples (hashable)."""
    out = {}
    for k, v in tree.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, name + "."))
        elif isinstance(v, list):
            out[name] = tuple(json.dumps(x, sort_keys=True) if isinstance(x, (dict, list)) else x for x in v)
        else:
            out[name] = v
    return out


@dataclass
class Run:
    """One run directory, read once."""

    path: Path
    name: str  # path relative to the sweep directory it was found in
    config: dict  # resolved config (nested); {} without .hydra/config.yaml
    overrides: list[str]  # the job's command-line / sweeper overrides
    choices: dict  # config-group choices Hydra recorded (hydra.runtime.choices), if hydra.yaml was kept
    summary: dict  # summary.json; {} while running or after a crash during setup
    records: list[dict] = field(default_factory=list)  # metrics.jsonl rows, in file order
    skipped_lines: int = 0  # unparsable lines (e.g. the half-written last line of a killed run)
    arm: str = ""  # set by whoever groups the runs (the report: the sweep's arm)

    @property
    def status(self) -> str:
        """finished | failed | incomplete (no summary.json: running, killed, or crashed while built)."""
        return str(self.summary.get("status", "incomplete")) if self.summary else "incomplete"

    @property
    def ok(self) -> bool:
        return self.status == "finished"

    @property
    def failed(self) -> bool:
        return self.status.lower() == "failed"

    @property
    def error(self) -> str:
        if self.status == "incomplete":
            return "no summary.json (still running, killed, or crashed while being built outside a sweep)"
        return str(self.summary.get("error") or "")

    @property
    def seed(self):
        return self.config.get("seed")

    @property
    def last_step(self) -> int:
        return max((int(r["step"]) for r in self.records), default=0)

    @cached_property
    def flat(self) -> dict:
        """The config flattened: {"algo.name": "grpo", ...}."""
        return flatten(self.config)

    def get(self, dotted: str, default=None):
        node = self.config
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def override(self, key: str) -> str | None:
        """The value the overrides give `key` (`key=v`, `+key=v`, `++key=v`), else None."""
        for o in self.overrides:
            k, sep, v = o.lstrip("+").partition("=")
            if sep and k == key:
                return v
        return None

    def by_step(self, key: str) -> dict[int, dict]:
        """{step: row} of the rows that log `key` (not None); a resumed run's later row for a step wins."""
        return {int(r["step"]): r for r in self.records if r.get(key) is not None}

    def series(self, key: str):
        """(steps [N], values [N]) as float arrays, sorted by step, of every row that logs `key`."""
        import numpy as np

        rows = self.by_step(key)
        steps = sorted(rows)
        return np.array(steps, dtype=float), np.array([float(rows[s][key]) for s in steps], dtype=float)


def _read_yaml(path: Path):
    import yaml

    return yaml.safe_load(path.read_text()) if path.is_file() else None


def _load_config(path: Path) -> dict:
    """The resolved config (an interpolation that cannot be resolved outside the run stays as written)."""
    if not path.is_file():
        return {}
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(path)
    try:
        out = OmegaConf.to_container(cfg, resolve=True)
    except Exception:
        out = OmegaConf.to_container(cfg, resolve=False)
    return out if isinstance(out, dict) else {}


def read_run(path: str | Path, root: str | Path | None = None) -> Run:
    """Read one run directory (every file optional; `find_runs` decides what counts as a run)."""
    path = Path(path)
    root = Path(root) if root is not None else path.parent
    hydra_cfg = _read_yaml(path / ".hydra" / "hydra.yaml") or {}
    choices = ((hydra_cfg.get("hydra") or {}).get("runtime") or {}).get("choices") or {}
    summary = {}
    if (path / SUMMARY).is_file():
        try:
            summary = json.loads((path / SUMMARY).read_text())
        except json.JSONDecodeError:
            summary = {"status": "failed", "error": "unreadable summary.json"}
    records, skipped = [], 0
    if (path / METRICS).is_file():
        raw = (path / METRICS).read_bytes()
        records = [row for _, row in parse_metrics(path / METRICS, raw, strict=False)[0]]
        skipped = sum(1 for ln in raw.split(b"\n") if ln.strip()) - len(records)
    rel = str(path.relative_to(root)) if path != root and path.is_relative_to(root) else path.name
    return Run(path, rel, _load_config(path / CONFIG), [str(o) for o in _read_yaml(path / OVERRIDES) or []],
               {str(k): v for k, v in choices.items()}, summary, records, skipped)


def natural_key(name: str) -> list:
    """Sort key that orders "2" before "10"."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def find_runs(root: str | Path, marker: str = METRICS) -> list[Path]:
    """Directories under root (itself included, no hidden ones) holding `marker`, in natural order."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"{root}: no such directory")
    depth = len(Path(marker).parts)
    found = {p.parents[depth - 1] for p in root.rglob(marker)}
    found = [d for d in found if not any(part.startswith(".") for part in d.relative_to(root).parts)]
    if not found:
        what = "run directory (no metrics.jsonl" if marker == METRICS else "job directory (no .hydra/config.yaml"
        raise ValueError(f"{root}: no {what} at any depth)")
    return sorted(found, key=lambda d: natural_key(str(d.relative_to(root))))


def read_sweep(root: str | Path, marker: str = METRICS) -> list[Run]:
    """Every run under root, read once, in natural path order (names relative to root)."""
    return [read_run(d, root) for d in find_runs(root, marker)]
