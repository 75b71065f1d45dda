"""Group runs into recipes (same config except seeds and bookkeeping) and give each a short label."""

from __future__ import annotations

from pathlib import Path

from rlx.scaling.logs import RunLog

# Config keys that do not define a recipe: any key with a `seed` part (run seed, data seed), and
# analysis/bookkeeping settings (prefixes).
NOT_RECIPE_PREFIXES = (
    "logger.", "scaling.", "paper", "hydra.", "model.cache_dir", "train.progress", "trainer.threads", "trainer.device",
    "train.resume", "train.log_every", "train.ckpt_every", "train.fail_at_step",
)


def is_recipe_key(key: str) -> bool:
    parts = key.split(".")
    if any(p == "seed" or p.endswith("_seed") or p.startswith("seed_") for p in parts):
        return False
    return not any(key == p.rstrip(".") or key.startswith(p) for p in NOT_RECIPE_PREFIXES)


def recipe_of(run: RunLog) -> tuple:
    """Hashable recipe identity: the run's config without seeds and bookkeeping (its path if it has none)."""
    if not run.config:
        return (("<dir>", str(run.path)),)
    return tuple(sorted((k, repr(v)) for k, v in run.config.items() if is_recipe_key(k)))


def group_by_recipe(runs: list[RunLog], root: Path) -> dict[str, list[RunLog]]:
    """{label: runs}, in first-seen order; labels name only what differs between recipes."""
    groups: dict[tuple, list[RunLog]] = {}
    for run in runs:
        groups.setdefault(recipe_of(run), []).append(run)
    labels = recipe_labels(list(groups), [g[0] for g in groups.values()], root)
    return {label: groups[key] for key, label in zip(groups, labels)}


def recipe_labels(keys: list[tuple], examples: list[RunLog], root: Path) -> list[str]:
    """Short unique labels: `k=v` for the config keys that differ; a group whose `name` differs shows only that."""
    dicts = [dict(k) for k in keys]
    all_keys = sorted(set().union(*dicts)) if dicts else []
    differing = [k for k in all_keys if len({d.get(k, "<unset>") for d in dicts}) > 1]
    named = {k.rsplit(".", 1)[0] for k in differing if k.endswith(".name") and "." in k}
    short = [k for k in differing if k.endswith(".name") or not any(k.startswith(g + ".") for g in named)]
    labels = []
    for d, run in zip(dicts, examples):
        if "<dir>" in d:
            labels.append(_relative(run.path, root))
        elif not differing:
            name = run.config.get("algo.name")
            labels.append(str(name) if name is not None else _relative(run.path, root))
        else:
            labels.append(", ".join(f"{_short_key(k)}={_plain(d.get(k, 'unset'))}" for k in short))
    if len(set(labels)) < len(labels):  # collapsing by group name hid a difference: show everything
        labels = [
            ", ".join(f"{_short_key(k)}={_plain(d.get(k, 'unset'))}" for k in differing) if "<dir>" not in d else lab
            for d, lab in zip(dicts, labels)
        ]
    return labels


def run_label(run: RunLog, recipe: str, root: Path) -> str:
    """A run's label inside its recipe: the recipe plus its seed (or its directory)."""
    seed = run.config.get("seed")
    return f"{recipe} (seed={seed})" if seed is not None else f"{recipe} [{_relative(run.path, root)}]"


def _short_key(key: str) -> str:
    return key[: -len(".name")] if key.endswith(".name") else key


def _plain(v: str) -> str:
    return v[1:-1] if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"" else v


def _relative(path: Path, root: Path) -> str:
    try:
        rel = str(path.relative_to(root))
    except ValueError:
        rel = str(path)
    return rel if rel != "." else path.name
