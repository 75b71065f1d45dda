"""Shared pieces of the sweep tests: the real sweep files at smoke size, composed or launched, and a stand-in
for the multirun of a predictive round (`fake_multirun`)."""

from __future__ import annotations

import functools
import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

from rlx.run.records import read_run
from rlx.scaling.curves import sigmoid
from tests.conftest import CONF, ROOT

SWEEPS = ROOT / "sweeps"
SWEEP_NAMES = sorted(p.stem for p in SWEEPS.glob("*.yaml"))
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))

# A tiny model and an easy task; none of these keys is swept by any sweep file (a command-line
# override of a swept key would replace the sweep axis), so the group size / prompts per step are
# added per sweep.
SMOKE = [
    "model.hidden_size=32", "model.intermediate_size=64", "model.num_layers=2", "model.num_heads=2",
    "model.num_kv_heads=1", "model.lora.r=4", "model.lora.alpha=8", "model.sft.steps=60",
    "task.num_terms=2", "task.max_operand=6", "task.n_train=60", "task.n_eval=12",
    "rollout.eval_k=2", "train.eval_every=1", "train.ckpt_every=2", "train.progress=false",
    "logger.mode=disabled", "trainer.threads=1",
]
BATCH = ["rollout.group_size=4", "rollout.prompts_per_step=4"]


def compose_sweep(name: str, overrides: list[str] | None = None, hydra: bool = False):
    """Compose sweeps/<name>.yaml (with conf/ on the search path) as one job of the sweep would see it."""
    from hydra import compose, initialize_config_dir

    from rlx.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(SWEEPS), version_base="1.3"):
        return compose(config_name=name, overrides=[f"hydra.searchpath=[file://{CONF}]", *(overrides or [])],
                       return_hydra_config=hydra)


@functools.lru_cache(maxsize=None)
def _axes(name: str) -> tuple:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = compose_sweep(name, hydra=True).hydra.sweeper.params or {}
    parser = OverridesParser.create()
    axes = []
    for key, value in params.items():
        (override,) = parser.parse_overrides([f"{key}={value}"])
        axes.append((key, tuple(override.sweep_string_iterator()) if override.is_sweep_override() else (str(value),)))
    return tuple(axes)


def sweep_axes(name: str) -> dict[str, list[str]]:
    """{key: values} of the sweep file's hydra.sweeper.params, parsed with Hydra's own override grammar."""
    return {k: list(v) for k, v in _axes(name)}


def sweep_jobs(name: str, all_seeds: bool = False) -> list[list[str]]:
    """The per-job overrides of the jobs the basic sweeper launches (the cartesian product of the axes).

    all_seeds=False keeps the first value of a `seed` axis: the seed changes no config structure, and
    each composition costs ~0.2 s.
    """
    axes = sweep_axes(name)
    if not all_seeds and "seed" in axes:
        axes["seed"] = axes["seed"][:1]
    return [[f"{k}={v}" for k, v in zip(axes, combo)] for combo in itertools.product(*axes.values())]


@functools.lru_cache(maxsize=None)
def composed_job(name: str, job: tuple[str, ...]):
    """compose_sweep, cached per (sweep, job overrides): several tests read the same jobs."""
    return compose_sweep(name, list(job))


def run_sweep(name: str, sweep_dir: Path, overrides: list[str], in_process: bool = True) -> None:
    """The one-command multirun `python -m rlx.train -m --config-dir sweeps --config-name <name> ...`.

    in_process=True runs exactly that module as __main__ with that argv (runpy, as `python -m` does),
    in this process: torch and transformers are imported once per test worker instead of once per
    sweep (~10 s each). in_process=False launches the command as a subprocess.
    """
    argv = ["-m", "--config-dir", str(SWEEPS), "--config-name", name, *overrides, f"hydra.sweep.dir={sweep_dir}"]
    if not in_process:
        proc = subprocess.run([sys.executable, "-m", "rlx.train", *argv], cwd=ROOT, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return
    import runpy

    from hydra.core.global_hydra import GlobalHydra

    saved = sys.argv
    sys.argv = [str(ROOT / "rlx" / "train.py"), *argv]
    try:
        runpy.run_module("rlx.train", run_name="__main__", alter_sys=True)
    except SystemExit as exit_:  # Hydra exits non-zero on a composition error
        assert not exit_.code, f"rlx.train exited with {exit_.code}"
    finally:
        sys.argv = saved
        GlobalHydra.instance().clear()  # let the compose API initialize again in this process


def job_dirs(sweep_dir: Path) -> list[Path]:
    return sorted((p for p in Path(sweep_dir).iterdir() if (p / ".hydra").is_dir()), key=lambda p: int(p.name))


def summary(job: Path) -> dict | None:
    """The job's summary.json (rlx.run.records), None when it has none."""
    return read_run(job).summary or None


def overrides(job: Path) -> dict[str, str]:
    return dict(o.split("=", 1) for o in read_run(job).overrides)


# (A, B, C_mid) of each arm's true curve in the predictive driver tests (fake_multirun)
TRUE = {"scalerl": (0.7, 2.5, 8.0), "on_policy": (0.3, 2.5, 8.0), "adv_group": (0.69, 2.5, 8.0)}


def fake_multirun(calls):
    """Stand-in for `python -m rlx.train -m ...`: writes what each job would (config, overrides, metrics
    appended from its last step, like a resumed run) into <sweep dir>/<arm>_seed<seed>."""

    def run(cmd):
        calls.append(cmd)
        kv = dict(o.split("=", 1) for o in cmd if "=" in o and not o.startswith("-"))
        steps, root = int(kv["train.steps"]), Path(kv["hydra.sweep.dir"])
        assert kv["hydra.sweep.subdir"] == "${hydra.runtime.choices.loo_arm}_seed${seed}"
        for name in kv["loo_arm"].split(","):
            for seed in kv["seed"].split(","):
                job = root / f"{name}_seed{seed}"
                (job / ".hydra").mkdir(parents=True, exist_ok=True)
                cfg = {"seed": int(seed), "train": {"steps": steps}, "logger": {"group": "scalerl_loo"},
                       "scaling": {"fit": "sigmoid", "compute": "steps", "metric": "val/acc", "bootstrap": 50}}
                (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
                (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(
                    [f"loo_arm={name}", f"seed={seed}", f"train.steps={steps}"]))
                metrics = job / "metrics.jsonl"
                done = [json.loads(x)["step"] for x in metrics.read_text().splitlines()] if metrics.exists() else []
                rng = np.random.default_rng(hash((name, seed, steps)) % 2**32)
                A, B, C = TRUE[name]
                with metrics.open("a") as fh:
                    for s in range(max(done, default=-2) + 2, steps + 1, 2):
                        acc = float(sigmoid(s, A, B, C, 0.1) + rng.normal(0, 0.01)) if s else 0.1
                        fh.write(json.dumps({"step": s, "val/acc": acc}) + "\n")
        return 0

    return run
