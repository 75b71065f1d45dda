"""`python -m rlx.report SWEEP_DIR`: a sweep's results in its paper's layout, with the published numbers.

Reads every job directory under SWEEP_DIR (any depth; a job is a directory holding
`.hydra/config.yaml`), finds each job's arm from `.hydra/overrides.yaml` (the sweep's arm group,
e.g. `qerl_arm=lora_nvfp4`, or the swept config keys) and its config, and writes:

- SWEEP_DIR/report.md (also printed): the paper-layout table(s), the paper's numbers alongside
  where they are comparable, and a table of every job with its status (failed jobs are marked);
- SWEEP_DIR/report_curves.png: train reward, policy entropy and held-out accuracy per arm
  (mean over seeds, min-max band);
- SWEEP_DIR/report_scaling.png (ScaleRL sweeps): pooled evaluations and fitted sigmoids per arm
  (fits by `rlx.scaling`).

The layout is chosen by the sweep's `logger.group` (set by every `sweeps/*.yaml`) or `--layout`.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import yaml

# ---------------------------------------------------------------------------------------------
# Published numbers (from the papers; see /work/shared/PAPERS.md)
# ---------------------------------------------------------------------------------------------

# QeRL Table 1: GSM8K accuracy (%). Columns keyed by (kind, format, noise); None = not in the paper.
QERL_TABLE1 = {
    "Qwen2.5-3B (paper)": {("base", "none", "none"): 61.2, ("base", "nvfp4", "none"): 59.4, "full_ft": 84.4,
                           ("lora", "none", "none"): 76.1, ("lora", "nf4", "none"): 76.1,
                           ("lora", "mxfp4", "none"): 73.4, ("lora", "nvfp4", "none"): 83.3,
                           ("lora", "nvfp4", "aqn"): 83.7},
    "Qwen2.5-7B (paper)": {("base", "none", "none"): 76.3, ("base", "nvfp4", "none"): 73.4, "full_ft": 91.2,
                           ("lora", "none", "none"): 88.1, ("lora", "nf4", "none"): 85.0,
                           ("lora", "mxfp4", "none"): 86.4, ("lora", "nvfp4", "none"): 88.5,
                           ("lora", "nvfp4", "aqn"): 90.8},
}
# QeRL rollout tokens/s, 16-bit LoRA -> NVFP4 LoRA, at batch 2 and batch 8.
QERL_SPEED = {
    "7B": {2: (115.4, 151.6), 8: (1641.1, 2091.8)},
    "14B": {2: (65.4, 95.3), 8: (737.2, 1091.1)},
    "32B": {2: (34.0, 60.0), 8: (344.3, 688.2)},
}
# NExt: Qwen2.5-7B / 14B, average over 5 math benchmarks (%), by method.
NEXT_TABLE = {
    "base": {"7B": "19.1", "14B": "–"},
    "none_n": {"7B": "22.1 (250 steps)", "14B": "25.8 (250 steps)"},
    "none_long": {"7B": "23.5 (400 steps)", "14B": "27.0 (400 steps)"},
    "linear": {"7B": "–", "14B": "–"},
    "next": {"7B": "24.2 (250 steps)", "14B": "28.3 (250 steps)"},
}
# ScaleRL: the recipe's fit (8B, GPU-hours, Table 1) and the few LOO numbers PAPERS.md records.
SCALERL_FIT = {"A": 0.610, "B": 1.92, "C_mid": 2542.0}
SCALERL_LOO_PAPER = {
    "scalerl": "B 2.01 (LOO baseline)",
    "loss_ppo_clip": "B 1.77 (DAPO loss)",
    "no_fp32_head": "A 0.52 (with FP32 head: 0.61)",
}

# ---------------------------------------------------------------------------------------------
# Jobs
# ---------------------------------------------------------------------------------------------


@dataclass
class Job:
    """One job directory of a sweep, read once."""

    path: Path
    name: str  # path relative to the sweep directory
    config: dict  # resolved config (nested)
    overrides: list[str]  # the job's command-line / sweeper overrides
    choices: dict  # config-group choices (hydra.runtime.choices)
    summary: dict
    records: list[dict] = field(default_factory=list)  # metrics.jsonl lines
    arm: str = ""

    @property
    def status(self) -> str:
        """finished | failed | incomplete (no summary.json: crashed during setup, or still running)."""
        return str(self.summary.get("status", "incomplete")) if self.summary else "incomplete"

    @property
    def ok(self) -> bool:
        return self.status == "finished"

    @property
    def error(self) -> str:
        if self.status == "incomplete":
            return "no summary.json (crashed before training started, or still running)"
        return str(self.summary.get("error") or "")

    @property
    def seed(self):
        return self.config.get("seed")

    def get(self, dotted: str, default=None):
        node = self.config
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def series(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps [N], values [N]) of every metrics line that has `key` (a resumed run's later line wins)."""
        by_step = {int(r["step"]): r[key] for r in self.records if r.get(key) is not None}
        steps = sorted(by_step)
        return np.array(steps, dtype=float), np.array([float(by_step[s]) for s in steps], dtype=float)


def _natural(name: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _load_config(path: Path) -> dict:
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(path)
    try:
        out = OmegaConf.to_container(cfg, resolve=True)
    except Exception:  # an interpolation that cannot be resolved outside the run: keep it as written
        out = OmegaConf.to_container(cfg, resolve=False)
    return out if isinstance(out, dict) else {}


def _read_yaml(path: Path):
    return yaml.safe_load(path.read_text()) if path.is_file() else None


def read_job(path: Path, root: Path) -> Job:
    hydra_dir = path / ".hydra"
    overrides = _read_yaml(hydra_dir / "overrides.yaml") or []
    hydra_cfg = _read_yaml(hydra_dir / "hydra.yaml") or {}
    choices = ((hydra_cfg.get("hydra") or {}).get("runtime") or {}).get("choices") or {}
    summary = {}
    if (path / "summary.json").is_file():
        try:
            summary = json.loads((path / "summary.json").read_text())
        except json.JSONDecodeError:
            summary = {"status": "failed", "error": "unreadable summary.json"}
    records = []
    metrics = path / "metrics.jsonl"
    if metrics.is_file():
        for line in metrics.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # e.g. the half-written last line of a killed run
            if isinstance(rec, dict) and "step" in rec:
                records.append(rec)
    rel = str(path.relative_to(root)) if path != root else path.name
    return Job(path, rel, _load_config(hydra_dir / "config.yaml"), [str(o) for o in overrides],
               {str(k): v for k, v in choices.items()}, summary, records)


def find_jobs(root: str | Path) -> list[Job]:
    """Every job directory (holding .hydra/config.yaml) under root, root included, in natural path order."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"{root}: no such directory")
    dirs = [p.parent.parent for p in root.rglob(".hydra/config.yaml")]
    dirs = [d for d in dirs if not any(part.startswith(".") for part in d.relative_to(root).parts)]
    if not dirs:
        raise ValueError(f"{root}: no job directory (no .hydra/config.yaml at any depth)")
    jobs = [read_job(d, root) for d in dirs]
    return sorted(jobs, key=lambda j: _natural(j.name))


def override_value(job: Job, key: str) -> str | None:
    """The value the job's overrides.yaml gives `key` (`key=v`, `+key=v`, `++key=v`), else None."""
    for o in job.overrides:
        k, sep, v = o.lstrip("+").partition("=")
        if sep and k == key:
            return v
    return None


# ---------------------------------------------------------------------------------------------
# Cells and small tables
# ---------------------------------------------------------------------------------------------


@dataclass
class Stat:
    """A metric over the finished seeds of an arm, plus how many jobs of the arm failed."""

    values: list[float]
    failed: int = 0

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values) if self.values else math.nan

    def cell(self, scale: float = 1.0, digits: int = 1) -> str:
        if not self.values:
            return f"failed ({self.failed})" if self.failed else "–"
        m = self.mean * scale
        text = f"{m:.{digits}f}"
        if len(self.values) > 1:
            text += f" ± {statistics.stdev(self.values) * scale:.{digits}f}"
        note = f"n={len(self.values)}" + (f", {self.failed} failed" if self.failed else "")
        return f"{text} ({note})"


def stat(jobs: list[Job], value: Callable[[Job], float | None]) -> Stat:
    vals = []
    for j in jobs:
        if not j.ok:
            continue
        v = value(j)
        if v is not None and math.isfinite(float(v)):
            vals.append(float(v))
    return Stat(vals, sum(not j.ok for j in jobs))


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    clean = lambda s: str(s).replace("|", "/").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(clean(c) for c in r) + " |" for r in rows]


def summary_value(key: str) -> Callable[[Job], float | None]:
    return lambda j: j.summary.get(key)


def mean_metric(key: str, skip_first: int = 0, reducer=np.mean) -> Callable[[Job], float | None]:
    """A reduction (mean, median) of a train metric over the run's steps >= 1 (after `skip_first` of them)."""

    def get(j: Job):
        steps, vals = j.series(key)
        vals = vals[steps >= 1][skip_first:]
        return float(reducer(vals)) if vals.size else None

    return get


def logged_value(key: str, index: int) -> Callable[[Job], float | None]:
    """The `index`-th logged value of `key` in the run's metrics (0: first, -1: last), None if never logged."""

    def get(j: Job):
        vals = j.series(key)[1]
        return float(vals[index]) if vals.size else None

    return get


def _first_tenth_mean(vals: np.ndarray) -> float:
    return float(vals[: max(1, len(vals) // 10)].mean())


def runs_table(jobs: list[Job]) -> list[str]:
    rows = []
    for j in jobs:
        acc = j.summary.get("val/acc")
        base = j.summary.get("val/acc_base")
        rows.append([j.name, j.arm, str(j.seed), j.status, str(j.get("train.steps")),
                     "–" if base is None else f"{100 * base:.1f}", "–" if acc is None else f"{100 * acc:.1f}",
                     f"{j.summary['wall_s']:.0f}" if j.summary.get("wall_s") is not None else "–",
                     j.error[:120]])
    return md_table(["job", "arm", "seed", "status", "steps", "val/acc base %", "val/acc %", "wall s", "error"], rows)


def by_arm(jobs: list[Job], order: list[str]) -> dict[str, list[Job]]:
    """Jobs grouped by arm: known arms in `order` first, then any others in first-seen order."""
    groups: dict[str, list[Job]] = {a: [] for a in order}
    for j in jobs:
        groups.setdefault(j.arm, []).append(j)
    return {a: js for a, js in groups.items() if js}


# ---------------------------------------------------------------------------------------------
# Layouts: arm identification + the paper's table
# ---------------------------------------------------------------------------------------------


@dataclass
class Layout:
    title: str
    arm_group: str | None  # the sweep's arm config group (sweeps/<arm_group>/*.yaml), if any
    order: list[str]  # arms in the paper's order
    infer: Callable[[Job], str]  # arm from the config when the job has no arm-group choice
    tables: Callable[[dict[str, list[Job]], list[Job]], list[str]]
    labels: dict[str, str] = field(default_factory=dict)
    scaling: bool = False


def arm_of(job: Job, layout: Layout) -> str:
    """The job's arm: the arm-group choice in its overrides (or Hydra's recorded choices), else its config."""
    if layout.arm_group:
        choice = override_value(job, layout.arm_group) or job.choices.get(layout.arm_group)
        if choice:
            return str(choice)
    return layout.infer(job)


def _acc(j: Job):
    return j.summary.get("val/acc")


def _fmt_pct(v) -> str:
    return "–" if v is None else f"{v:.1f}"


# ---- QeRL Table 1 -----------------------------------------------------------------------------

QERL_ARMS = ["base_none", "base_nf4", "base_mxfp4", "base_nvfp4",
             "lora_none", "lora_nf4", "lora_mxfp4", "lora_nvfp4", "lora_nvfp4_aqn"]
QERL_LABELS = {"base_none": "16-bit base", "base_nf4": "NF4 base", "base_mxfp4": "MXFP4 base",
               "base_nvfp4": "NVFP4 base", "lora_none": "16-bit LoRA", "lora_nf4": "NF4 LoRA (QLoRA)",
               "lora_mxfp4": "MXFP4 LoRA", "lora_nvfp4": "NVFP4 LoRA", "lora_nvfp4_aqn": "NVFP4 LoRA + AQN"}


def _qerl_key(arm: str) -> tuple | None:
    kind, _, rest = arm.partition("_")
    fmt, _, noise = rest.partition("_")
    return (kind, fmt, noise or "none") if kind in ("base", "lora") else None


def infer_qerl(j: Job) -> str:
    kind = "base" if j.get("train.steps") == 0 else "lora"
    noise = j.get("noise.type", "none")
    return f"{kind}_{j.get('quant.format', 'none')}" + (f"_{noise}" if noise != "none" else "")


def qerl_tables(arms: dict[str, list[Job]], jobs: list[Job]) -> list[str]:
    # a "no RL" row is the step-0 evaluation (identical to val/acc when train.steps=0); when the sweep
    # has no base arm for a format, the step-0 evaluations of that format's LoRA runs give the same number
    base_of = {}
    for fmt in ("none", "nf4", "mxfp4", "nvfp4"):
        src = arms.get(f"base_{fmt}") or arms.get(f"lora_{fmt}") or arms.get(f"lora_{fmt}_aqn") or []
        base_of[fmt] = (stat(src, summary_value("val/acc_base")), f"base_{fmt}" in arms)
    cols = QERL_ARMS[:4] + ["full_ft"] + QERL_ARMS[4:]
    header = ["model"] + [QERL_LABELS.get(c, "full FT") for c in cols]
    ours = []
    for c in cols:
        if c == "full_ft":
            ours.append("– (not in rlx)")
        elif c.startswith("base_"):
            s, direct = base_of[c[5:]]
            ours.append(s.cell(100) + ("" if direct or not s.values else " †"))
        else:
            ours.append(stat(arms.get(c, []), _acc).cell(100))
    rows = [["rlx tiny (this sweep)"] + ours]
    for model, nums in QERL_TABLE1.items():
        rows.append([model] + [_fmt_pct(nums.get(c if c == "full_ft" else _qerl_key(c))) for c in cols])
    out = ["## QeRL Table 1: held-out accuracy (%)", "",
           "Greedy accuracy on the held-out split after RL (LoRA columns) and before any RL (base columns: "
           "the step-0 evaluation). Mean ± std over seeds (n finished seeds; failed jobs counted apart). "
           "rlx's 16-bit columns are the unquantized base (fp32 for the tiny model). "
           "Paper rows: GSM8K, QeRL Table 1.", ""]
    out += md_table(header, rows)
    if any(not direct and s.values for s, direct in base_of.values()):
        out += ["", "† no base arm in this sweep: the step-0 evaluation of that format's LoRA runs (the same model, "
                "LoRA B = 0)."]
    # QeRL's mechanism claim: quantization noise raises policy entropy, which helps exploration
    rows = []
    for arm, js in arms.items():
        if not arm.startswith("lora"):
            continue
        fmt = (_qerl_key(arm) or ("", "none"))[1]
        gain = stat(js, lambda j: (j.summary.get("val/acc") or 0) - (j.summary.get("val/acc_base") or 0))
        rows.append([QERL_LABELS.get(arm, arm), stat(js, mean_metric("actor/entropy")).cell(1, 3),
                     stat(js, mean_metric("actor/entropy", reducer=_first_tenth_mean)).cell(1, 3),
                     stat(js, mean_metric("train/reward/mean")).cell(1, 3), gain.cell(100),
                     stat(js, summary_value("val/mean_at_k")).cell(100), fmt])
    if rows:
        out += ["", "### Exploration and gains (QeRL's entropy claim)", ""]
        out += md_table(["arm", "policy entropy (mean over steps)", "entropy, first 10% of steps",
                         "train reward (mean over steps)", "val/acc gain over its base (pts)", "val/mean@k (%)",
                         "base format"], rows)
    return out


# ---- QeRL speed -------------------------------------------------------------------------------

def infer_speed(j: Job) -> str:
    return str(j.get("quant.format", "none"))


def _batch(j: Job) -> int:
    return int(j.get("rollout.prompts_per_step", 0)) * int(j.get("rollout.group_size", 0))


def speed_tables(arms: dict[str, list[Job]], jobs: list[Job]) -> list[str]:
    batches = sorted({_batch(j) for j in jobs})
    tok = lambda js: stat(js, mean_metric("perf/tokens_per_s", skip_first=1, reducer=np.median))  # noqa: E731
    train_s = lambda js: stat(js, mean_metric("timing_s/train", skip_first=1, reducer=np.median))  # noqa: E731
    header = (["base format"] + [f"rollout tokens/s, batch {b}" for b in batches]
              + [f"x vs 16-bit, batch {b}" for b in batches] + [f"train step s, batch {b}" for b in batches])
    ref = {b: tok([j for j in arms.get("none", []) if _batch(j) == b]).mean for b in batches}
    rows = []
    for fmt, js in arms.items():
        per_b = {b: [j for j in js if _batch(j) == b] for b in batches}
        t = {b: tok(per_b[b]) for b in batches}
        ratio = [f"{t[b].mean / ref[b]:.2f}" if t[b].values and ref[b] and math.isfinite(ref[b]) else "–"
                 for b in batches]
        rows.append([fmt] + [t[b].cell(1, 0) for b in batches] + ratio
                    + [train_s(per_b[b]).cell(1, 3) for b in batches])
    out = ["## QeRL speed: rollout throughput and train step time", "",
           "Median over RL steps 2.. of each job (step 1 is warm-up), then mean ± std over seeds. Batch = "
           "prompts_per_step x group_size sequences generated together. On a CPU the packed formats "
           "dequantize in every forward, so they are not expected to be faster here; the paper's gain is "
           "memory-bandwidth-bound decoding on a GPU with NVFP4 kernels.", ""]
    out += md_table(header, rows)
    out += ["", "Paper (QeRL, rollout tokens/s, 16-bit LoRA -> NVFP4 LoRA; vLLM on one GPU):", ""]
    speedup = lambda old, new: f"{old} -> {new} (x{new / old:.2f})"  # noqa: E731
    prow = [[m, speedup(*v[2]), speedup(*v[8])] for m, v in QERL_SPEED.items()]
    out += md_table(["model", "batch 2", "batch 8"], prow)
    return out


# ---- NExt -------------------------------------------------------------------------------------

NEXT_ARMS = ["none_n", "none_long", "linear", "next"]


def infer_next(j: Job) -> str:
    kind = j.get("extrapolation.type", "none")
    return "none" if kind == "none" else str(kind)  # N vs 1.6N needs the arm group (or the steps table)


def _steps_to_reach(j: Job, target: float) -> float | None:
    steps, acc = j.series("val/acc")
    hit = steps[(acc >= target - 1e-12) & (steps > 0)]
    return float(hit[0]) if hit.size else None


def next_tables(arms: dict[str, list[Job]], jobs: list[Job]) -> list[str]:
    long_final = stat(arms.get("none_long", []), _acc)
    target = long_final.mean if long_final.values else math.nan
    labels = {"none_n": "GRPO-LoRA, N steps", "none_long": "GRPO-LoRA, 1.6N steps",
              "linear": "linear extrapolation (RL-Extra)", "next": "NExt predict-extend"}
    rows = []
    every = [j for js in arms.values() for j in js]
    base = stat(every, summary_value("val/acc_base"))
    rows.append(["backbone (no RL, step 0)", "0", "–", base.cell(100),
                 stat(every, logged_value("val/mean_at_k", 0)).cell(100),
                 "–", "–", NEXT_TABLE["base"]["7B"], NEXT_TABLE["base"]["14B"]])
    for arm, js in arms.items():
        steps = sorted({j.get("train.steps") for j in js})
        ext = sorted({tuple(j.get("extrapolation.extend_at") or []) for j in js
                      if j.get("extrapolation.type") != "none"})
        reach = []
        for j in js:
            if j.ok and math.isfinite(target):
                reach.append(_steps_to_reach(j, target))
        reached = [r for r in reach if r is not None]
        reach_cell = ("–" if not reach else
                      f"{statistics.fmean(reached):.0f} ({len(reached)}/{len(reach)} seeds reach it)" if reached
                      else f"not reached (0/{len(reach)})")
        saved = stat(js, logged_value("extrap/steps_saved", -1))
        paper = NEXT_TABLE.get(arm, {"7B": "–", "14B": "–"})
        rows.append([labels.get(arm, arm), "/".join(str(s) for s in steps),
                     ", ".join(str(list(e)) for e in ext) or "–", stat(js, _acc).cell(100),
                     stat(js, summary_value("val/mean_at_k")).cell(100), reach_cell,
                     saved.cell(1, 0) if saved.values else "–", paper["7B"], paper["14B"]])
    out = ["## NExt: accuracy at equal and at 1.6x the RL steps", "",
           f"Held-out greedy accuracy (%) and mean@k (%), mean ± std over seeds. 'steps to reach' = the first "
           f"evaluation step at which a run's val/acc >= the mean final val/acc of GRPO-LoRA at 1.6N steps "
           f"({100 * target:.1f}%); the paper's claim is that NExt at N matches 1.6N (250 vs 400 steps). "
           f"'claimed steps saved' = extrap/steps_saved (the jump's nominal claim). Paper columns: average over "
           f"5 math benchmarks (%).", ""]
    out += md_table(["method", "RL steps", "extend at", "val/acc (%)", "val/mean@k (%)",
                     "steps to reach 1.6N's final acc", "claimed steps saved", "paper Qwen2.5-7B",
                     "paper 14B"], rows)
    return out


# ---- ScaleRL ----------------------------------------------------------------------------------

def scaling_config(jobs: list[Job]):
    """The sweep's ScalingConfig (the first job's `scaling.*`, with fit defaulting to sigmoid)."""
    from rlx.scaling.config import as_config

    given = dict(jobs[0].config.get("scaling") or {}) if jobs else {}
    if given.get("fit", "none") == "none":
        given["fit"] = "sigmoid"
    return as_config(given)


@dataclass
class ArmFit:
    arm: str
    compute: np.ndarray  # [N] pooled evaluations after step 0
    reward: np.ndarray  # [N]
    r0: float | None
    fit: object | None
    note: str = ""


def fit_arms(arms: dict[str, list[Job]], cfg) -> dict[str, ArmFit]:
    """Per arm: pool the finished seeds' evaluations and fit the sweep's curve (rlx.scaling)."""
    from rlx.runs import read_run
    from rlx.scaling.fitting import fit_points
    from rlx.scaling.grouping import evaluations, pool

    out = {}
    for arm, js in arms.items():
        series, notes = [], []
        for j in js:
            if not j.ok:
                continue
            try:
                series.append(evaluations(read_run(j.path), cfg.metric, cfg.compute))
            except ValueError as err:
                notes.append(str(err))
        c, y, r0 = pool(series)
        fit = None
        if c.size:
            try:
                fit = fit_points(c, y, cfg, r0=r0)
            except ValueError as err:
                notes.append(f"no fit: {err}")
        elif not notes:
            notes.append("no finished run" if not series else "no evaluation after step 0")
        out[arm] = ArmFit(arm, c, y, r0, fit, "; ".join(notes))
    return out


def _fit_cells(f: ArmFit) -> list[str]:
    if f.fit is None:
        return ["–", "–", "–"]
    p, iv = f.fit.params, f.fit.intervals
    a = f"{p['A']:.3f}" + (f" ± {(iv['A'][1] - iv['A'][0]) / 2:.3f}" if "A" in iv else "")
    b = f"{p['B']:.2f}" + (f" [{iv['B'][0]:.2f}, {iv['B'][1]:.2f}]" if "B" in iv else "")
    return [a, b, f"{p['C_mid']:.3g}" if "C_mid" in p else "–"]


def _verdict(first: ArmFit, second: ArmFit, cfg) -> str:
    from rlx.scaling.compare import scalerl_rule

    if first.fit is None or second.fit is None or first.fit.kind != "sigmoid" or second.fit.kind != "sigmoid":
        return "–"
    try:
        v = scalerl_rule((first.arm, first.compute, first.reward, first.r0),
                         (second.arm, second.compute, second.reward, second.r0), cfg.margin,
                         fit_first=first.fit, fit_second=second.fit, exclude_before=cfg.exclude_before,
                         exclude_fraction=cfg.exclude_fraction, a_step=cfg.a_step, n_cmid=cfg.n_cmid,
                         bootstrap=cfg.bootstrap, confidence=cfg.confidence, seed=cfg.seed,
                         min_points=cfg.min_points)
    except ValueError as err:
        return f"no verdict: {err}"
    how = ("higher A" if v.rule == "asymptote"
           else f"B at common A={v.A_common:.3f}: {v.B_first:.2f} vs {v.B_second:.2f}")
    sure = "" if v.separable else " (intervals overlap)"
    return f"{v.winner} ({how}){sure}"


def _scaling_intro(cfg) -> list[str]:
    return [f"Sigmoid R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) fitted by rlx.scaling to {cfg.metric} against "
            f"cumulative compute ({cfg.compute}), seeds pooled per arm, R0 fixed at the mean step-0 evaluation. "
            f"A: fit ± half its {int(round(100 * cfg.confidence))}% bootstrap interval. C_mid is in {cfg.compute} "
            f"(the paper's is GPU-hours, so only A and B compare). ScaleRL's rule: |dA| > {cfg.margin:g} -> the "
            f"higher A wins, else refit at a common A and the higher B wins.", ""]


LOSS_ARMS = ["grpo", "dapo", "cispo", "gspo", "scalerl"]


def infer_algo(j: Job) -> str:
    return str(j.get("algo.name", "?"))


def losses_tables(arms: dict[str, list[Job]], jobs: list[Job]) -> list[str]:
    cfg = scaling_config(jobs)
    fits = fit_arms(arms, cfg)
    ref = fits.get("scalerl")
    rows = []
    for arm, js in arms.items():
        f = fits[arm]
        paper = {"scalerl": f"A {SCALERL_FIT['A']}, B {SCALERL_FIT['B']}, C_mid {SCALERL_FIT['C_mid']:g} GPU-h",
                 "dapo": "B 1.77 vs CISPO 2.01 (LOO)"}.get(arm, "–")
        verdict = _verdict(ref, f, cfg) if ref is not None and arm != "scalerl" else "–"
        rows.append([arm, f"{sum(j.ok for j in js)}/{len(js)}", stat(js, summary_value(cfg.metric)).cell(100),
                     *_fit_cells(f), verdict, paper, f.note])
    out = ["## ScaleRL: loss / recipe comparison with sigmoid fits", ""] + _scaling_intro(cfg)
    out += md_table(["algo", "finished", f"final {cfg.metric} (%)", "A", "B", "C_mid", "vs scalerl (ScaleRL's rule)",
                     "paper", "note"], rows)
    return out


LOO_ARMS = ["scalerl", "loss_ppo_clip", "agg_sample", "adv_group", "no_zero_var_filter", "no_pos_resampling",
            "no_fp32_head", "no_interruption", "on_policy"]
LOO_LABELS = {"scalerl": "ScaleRL (all components)", "loss_ppo_clip": "loss: CISPO -> PPO clip (DAPO, 0.2/0.28)",
              "agg_sample": "aggregation: prompt -> sample", "adv_group": "advantage norm: batch -> group",
              "no_zero_var_filter": "zero-variance filter off", "no_pos_resampling": "no-positive-resampling off",
              "no_fp32_head": "FP32 LM head off", "no_interruption": "forced length interruption off",
              "on_policy": "PipelineRL-8 -> on-policy (sync)"}


def infer_loo(j: Job) -> str:
    a = j.config.get("algo") or {}
    diffs = []
    if a.get("loss") != "cispo":
        diffs.append("loss_ppo_clip" if a.get("loss") == "ppo_clip" else f"loss_{a.get('loss')}")
    if a.get("aggregation") != "prompt":
        diffs.append(f"agg_{a.get('aggregation')}")
    if a.get("adv_norm") != "batch":
        diffs.append(f"adv_{a.get('adv_norm')}")
    if not a.get("zero_variance_filter"):
        diffs.append("no_zero_var_filter")
    if not a.get("no_positive_resampling"):
        diffs.append("no_pos_resampling")
    if not a.get("fp32_lm_head"):
        diffs.append("no_fp32_head")
    r = j.config.get("rollout") or {}
    if not (r.get("interrupt") or {}).get("enabled", True):
        diffs.append("no_interruption")
    if r.get("mode", "stale") == "sync" or r.get("max_staleness", 8) == 0:
        diffs.append("on_policy")
    return "+".join(diffs) or "scalerl"


def _vs_reference(arms: dict[str, list[Job]], jobs: list[Job], ref_arm: str, labels: dict[str, str],
                  paper: dict[str, str], title: str, first_col: str) -> list[str]:
    """Sigmoid fit per arm and ScaleRL's rule of every arm against `ref_arm`."""
    cfg = scaling_config(jobs)
    fits = fit_arms(arms, cfg)
    ref = fits.get(ref_arm)
    rows = []
    for arm, js in arms.items():
        f = fits[arm]
        dA = (f"{f.fit.A - ref.fit.A:+.3f}" if ref is not None and ref.fit is not None and f.fit is not None
              and arm != ref_arm else "–")
        verdict = _verdict(ref, f, cfg) if ref is not None and arm != ref_arm else "–"
        rows.append([labels.get(arm, arm), f"{sum(j.ok for j in js)}/{len(js)}",
                     stat(js, summary_value(cfg.metric)).cell(100), *_fit_cells(f), dA, verdict,
                     paper.get(arm, "–"), f.note])
    out = [title, ""] + _scaling_intro(cfg)
    out += md_table([first_col, "finished", f"final {cfg.metric} (%)", "A", "B", "C_mid", f"dA vs {labels.get(ref_arm, ref_arm)}",
                     "ScaleRL's rule vs it", "paper", "note"], rows)
    return out


def loo_tables(arms: dict[str, list[Job]], jobs: list[Job]) -> list[str]:
    return _vs_reference(arms, jobs, "scalerl", LOO_LABELS, SCALERL_LOO_PAPER,
                         "## ScaleRL leave-one-out: each component reverted in turn", "recipe")


OFFPOLICY_ARMS = ["pipeline_8", "ppo_8", "on_policy"]
OFFPOLICY_LABELS = {"pipeline_8": "PipelineRL-8 (stale k=8, mu 1)", "ppo_8": "PPO-8 (on-policy batch, mu 8)",
                    "on_policy": "on-policy (sync, mu 1)"}


def infer_offpolicy(j: Job) -> str:
    r, a = j.config.get("rollout") or {}, j.config.get("algo") or {}
    if r.get("mode") != "sync" and r.get("max_staleness", 0) > 0:
        return f"pipeline_{r['max_staleness']}"
    return f"ppo_{a['mu']}" if a.get("mu", 1) > 1 else "on_policy"


def offpolicy_tables(arms: dict[str, list[Job]], jobs: list[Job]) -> list[str]:
    return _vs_reference(arms, jobs, "pipeline_8", OFFPOLICY_LABELS, {"pipeline_8": "beats PPO-8 in efficiency (B)"},
                         "## ScaleRL off-policy families: PipelineRL-k vs PPO-k", "off-policy family")


LAYOUTS: dict[str, Layout] = {
    "qerl_table1": Layout("QeRL Table 1 (tiny scale)", "qerl_arm", QERL_ARMS, infer_qerl, qerl_tables, QERL_LABELS),
    "qerl_speed": Layout("QeRL speed (tiny scale)", None, ["none", "nf4", "mxfp4", "nvfp4"], infer_speed,
                         speed_tables),
    "next_table": Layout("NExt (tiny scale)", "next_arm", NEXT_ARMS, infer_next, next_tables),
    "scalerl_losses": Layout("ScaleRL losses (tiny scale)", None, LOSS_ARMS, infer_algo, losses_tables, scaling=True),
    "scalerl_loo": Layout("ScaleRL leave-one-out (tiny scale)", "loo_arm", LOO_ARMS, infer_loo, loo_tables,
                          LOO_LABELS, scaling=True),
    "scalerl_offpolicy": Layout("ScaleRL off-policy families (tiny scale)", "offpolicy_arm", OFFPOLICY_ARMS,
                                infer_offpolicy, offpolicy_tables, OFFPOLICY_LABELS, scaling=True),
}


def detect_layout(jobs: list[Job]) -> str:
    groups = {j.get("logger.group") for j in jobs} - {None}
    known = [g for g in groups if g in LAYOUTS]
    if len(known) == 1:
        return known[0]
    raise ValueError(f"cannot tell the sweep's layout from logger.group ({sorted(map(str, groups)) or 'unset'}); "
                     f"pass --layout, one of {', '.join(LAYOUTS)}")


# ---------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------

CURVE_PANELS = [("train/reward/mean", "train reward (mean)"), ("actor/entropy", "policy entropy (rollouts)")]
EVAL_TITLES = {"val/acc": "held-out accuracy (greedy)", "val/mean_at_k": "held-out pass rate (mean@k)"}


def _smooth(y: np.ndarray, window: int) -> np.ndarray:
    if window <= 1 or y.size < window:
        return y
    kernel = np.ones(window) / window
    pad = np.pad(y, (window // 2, window - 1 - window // 2), mode="edge")
    return np.convolve(pad, kernel, mode="valid")


def plot_curves(arms: dict[str, list[Job]], path: Path, labels: dict[str, str],
                eval_key: str = "val/acc") -> Path | None:
    """Per arm: the mean over seeds of train reward, entropy and `eval_key` against the RL step (band: min-max)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = CURVE_PANELS + [(eval_key, EVAL_TITLES.get(eval_key, eval_key))]
    fig = Figure(figsize=(15, 4.2), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels))
    drawn = False
    for i, (arm, js) in enumerate(arms.items()):
        color = f"C{i % 10}"
        for ax, (key, title) in zip(axes, panels):
            runs = [j.series(key) for j in js if j.records]
            runs = [(s, v) for s, v in runs if s.size]
            if key != eval_key:
                runs = [(s[s >= 1], v[s >= 1]) for s, v in runs]
                runs = [(s, v) for s, v in runs if s.size]
            if not runs:
                continue
            steps = np.array(sorted(set().union(*[set(s.tolist()) for s, _ in runs])))
            grid = np.full((len(runs), steps.size), np.nan)
            for r, (s, v) in enumerate(runs):
                grid[r, np.searchsorted(steps, s)] = v
            with np.errstate(all="ignore"):
                mean, lo, hi = np.nanmean(grid, 0), np.nanmin(grid, 0), np.nanmax(grid, 0)
            window = max(1, steps.size // 20) if key != eval_key else 1
            ax.plot(steps, _smooth(mean, window), color=color, lw=1.5, label=labels.get(arm, arm),
                    marker="o" if key == eval_key else None, ms=3)
            if len(runs) > 1:
                ax.fill_between(steps, lo, hi, color=color, alpha=0.12, lw=0)
            drawn = True
    if not drawn:
        return None
    for ax, (key, title) in zip(axes, panels):
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("RL step")
        ax.grid(True, alpha=0.25)
    next((ax for ax in axes if ax.lines), axes[0]).legend(fontsize=7, loc="best")
    fig.suptitle("mean over seeds (band: min-max); train panels smoothed over ~5% of the steps", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


def plot_scaling(arms: dict[str, list[Job]], path: Path, labels: dict[str, str], cfg) -> Path | None:
    from rlx.scaling.plot import Curve, save_curves
    from rlx.scaling.fitting import target_compute

    fits = fit_arms(arms, cfg)
    curves = [Curve(labels.get(a, a), f.compute, f.reward, f.fit) for a, f in fits.items() if f.compute.size]
    if not curves:
        return None
    target = target_compute(cfg, max(float(c.compute.max()) for c in curves))
    return save_curves(path, curves, cfg.compute, cfg.metric, target,
                       title=f"{cfg.metric} vs compute ({cfg.compute}), sigmoid fits per arm", with_asymptotes=True)


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def sweep_command(root: Path) -> str | None:
    """The command that launched the sweep, from Hydra's SWEEP_DIR/multirun.yaml (None if absent)."""
    import shlex

    found = sorted(root.glob("multirun.yaml")) or sorted(root.glob("*/multirun.yaml"))
    if not found:
        return None
    hydra_cfg = (_read_yaml(found[0]) or {}).get("hydra") or {}
    name = (hydra_cfg.get("job") or {}).get("config_name") or "config"
    task = (hydra_cfg.get("overrides") or {}).get("task") or []
    head = ["python", "-m", "rlx.train", "-m"] + ([] if name == "config" else ["--config-dir", "sweeps",
                                                                               "--config-name", name])
    return " ".join(head + [shlex.quote(str(o)) for o in task])


def build_report(root: str | Path, layout: str | None = None, plots: bool = True) -> tuple[str, list[Path]]:
    """(markdown, PNG paths) for the sweep under root; nothing is written except the PNGs."""
    root = Path(root)
    jobs = find_jobs(root)
    name = layout or detect_layout(jobs)
    if name not in LAYOUTS:
        raise ValueError(f"unknown layout {name!r}; choose one of {', '.join(LAYOUTS)}")
    lay = LAYOUTS[name]
    for j in jobs:
        j.arm = arm_of(j, lay)
    arms = by_arm(jobs, lay.order)
    n_failed = sum(not j.ok for j in jobs)
    walls = [float(j.summary["wall_s"]) for j in jobs if j.summary.get("wall_s") is not None]
    lines = [f"# {lay.title}: `{root}`", "",
             f"{len(jobs)} jobs, {len(arms)} arms, {n_failed} not finished"
             + (" (marked failed below)" if n_failed else "")
             + (f"; job wall time {sum(walls) / 60:.1f} min in all (longest job {max(walls):.0f} s)" if walls else "")
             + ".", ""]
    command = sweep_command(root)
    if command:
        lines += ["Command (from multirun.yaml; the sweep directory was "
                  f"`{root}`):", "", "```bash", command, "```", ""]
    lines += lay.tables(arms, jobs)
    pngs: list[Path] = []
    if plots:
        eval_key = scaling_config(jobs).metric if lay.scaling else "val/acc"
        p = plot_curves(arms, root / "report_curves.png", lay.labels, eval_key)
        if p is not None:
            pngs.append(p)
        if lay.scaling:
            p = plot_scaling(arms, root / "report_scaling.png", lay.labels, scaling_config(jobs))
            if p is not None:
                pngs.append(p)
    if pngs:
        lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in pngs]
    lines += ["", "## Jobs", ""] + runs_table(jobs)
    return "\n".join(lines) + "\n", pngs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlx.report", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, help="a sweep directory (job directories at any depth)")
    parser.add_argument("--layout", choices=sorted(LAYOUTS), help="default: from the jobs' logger.group")
    parser.add_argument("--out", default="report.md", help="file name inside SWEEP_DIR (default report.md)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    args = parser.parse_args(argv)
    try:
        md, pngs = build_report(args.sweep_dir, args.layout, plots=not args.no_plots)
    except ValueError as err:
        parser.error(str(err))
    out = args.sweep_dir / args.out
    out.write_text(md)
    print(md)
    print(f"saved {out}" + "".join(f", {p}" for p in pngs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
