"""What the repository's sweeps/ holds: the sweeps, each one's arm axis (the first swept key, seed aside, that
names a config group) and arm files, and the command and sweep directory that run one (docs/sweeps.md)."""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

import yaml

from rlx.run.records import flatten

ROOT = Path(__file__).resolve().parents[2]
SWEEPS_DIR, CONF_DIR = ROOT / "sweeps", ROOT / "conf"


def available(sweeps_dir: Path = SWEEPS_DIR) -> dict[str, str]:
    """{sweep name: the first line of its header comment}, for every sweeps/*.yaml."""
    return {path.stem: next((ln.lstrip("# ").strip() for ln in path.read_text().splitlines() if ln.startswith("#")), "")
            for path in sorted(sweeps_dir.glob("*.yaml"))}


def sweep_file(name: str) -> dict:
    """sweeps/<name>.yaml as written (an empty file: {})."""
    return yaml.safe_load((SWEEPS_DIR / f"{name}.yaml").read_text()) or {}


@functools.cache
def arm_axis(sweep: str) -> tuple[str | None, tuple[str, ...]]:
    """(arm key, arms in order) of sweeps/<sweep>.yaml; (None, ()) when it has no config-group axis."""
    params = (sweep_file(sweep).get("hydra") or {}).get("sweeper", {}).get("params") or {}
    for key, values in params.items():
        if key != "seed" and ((SWEEPS_DIR / key).is_dir() or (CONF_DIR / key).is_dir()):
            return key, tuple(v.strip() for v in str(values).split(","))
    return None, ()


@functools.cache
def arm_settings(group: str) -> dict[str, dict]:
    """{arm: its settings, flattened} for every sweeps/<group>/<arm>.yaml (Hydra's `defaults` list left out)."""
    out = {}
    for path in sorted((SWEEPS_DIR / group).glob("*.yaml")):
        tree = yaml.safe_load(path.read_text()) or {}
        out[path.stem] = flatten({k: v for k, v in tree.items() if k != "defaults"})
    return out


def train_command(name: str, overrides: list[str], sweeps_dir: Path = SWEEPS_DIR) -> list[str]:
    """The `python -m rlx.train -m ...` argv that runs sweep `name` with extra overrides."""
    return [sys.executable, "-m", "rlx.train", "-m", "--config-dir", str(sweeps_dir), "--config-name", name,
            *overrides]


def fixed_sweep_dir(name: str) -> str | None:
    """The sweep file's hydra.sweep.dir when it is a fixed path (no ${now:...}): a sweep that resumes; else None."""
    try:
        value = ((sweep_file(name).get("hydra") or {}).get("sweep") or {}).get("dir")
    except FileNotFoundError:
        return None
    return value if isinstance(value, str) and value and "${" not in value else None


def sweep_dir_of(name: str, overrides: list[str]) -> tuple[str, list[str]]:
    """(the sweep directory, the overrides with it set): the given one, else the file's fixed one, else a new one."""
    for o in overrides:
        key, sep, value = o.partition("=")
        if sep and key.lstrip("+") == "hydra.sweep.dir":
            return value, overrides
    path = fixed_sweep_dir(name) or f"outputs/sweeps/{name}/{time.strftime('%Y-%m-%d_%H-%M-%S')}"
    return path, [*overrides, f"hydra.sweep.dir={path}"]
