"""The pinned trajectory of the default experiment: what `test_trajectory.py` compares a fresh run against.

The default experiment (conf/config.yaml: model=tiny, task=arith, algo=grpo, rollout=hf; the SFT base of
300 steps it builds and caches) for its first STEPS RL steps, in fp32 on one thread, so the numbers are the
same on every CPU kind up to float-summation noise (trainer.dtype=auto would pick bf16 on CPUs with bf16
instructions), and bitwise on the machine that wrote them. Only keys that change no number differ from
`python -m rlx.train`: the step budget (the first STEPS steps of the 200-step run are these), the logger,
the progress bar, the threads and the dtype.

A change that moves these numbers on purpose (a loss, an optimizer, a sampler, a default) regenerates the
file in the same commit and says why in the message:

    python -m tests.regression.reference            # rewrites tests/regression/reference_default.json
"""

from __future__ import annotations

import json
import math
import platform
import sys
import tempfile
from pathlib import Path

REFERENCE = Path(__file__).with_name("reference_default.json")
STEPS = 4
OVERRIDES = [f"train.steps={STEPS}", "trainer.threads=1", "trainer.dtype=fp32", "logger.mode=disabled",
             "train.progress=false"]
# what a step pins: the update's loss and gradient norm, the reward the update saw, the policy's entropy;
# the held-out accuracy of the base (step 0) and after STEPS steps
KEYS = ("actor/loss", "actor/grad_norm", "train/reward/mean", "actor/entropy", "val/acc")
# |got - ref| <= atol + rtol * |ref|. On the machine that wrote the file a rerun is bitwise equal; the
# tolerance is for float-summation differences on other CPU kinds (which could flip a near-tie sample:
# one completion of the 128 moves the mean reward by 1/128). A deliberate break moves them far more:
# a flipped loss sign flips actor/loss at step 1, a reward that always pays makes train/reward/mean 1.0.
TOLERANCE = {"rtol": 0.02, "atol": {"actor/loss": 1e-3, "actor/grad_norm": 2e-3, "train/reward/mean": 1 / 64,
                                    "actor/entropy": 5e-3, "val/acc": 0.011}}
VERSION = 1  # bump with every regeneration that changes the numbers


def trajectory(run_dir: Path) -> dict[str, dict[str, float]]:
    """{step: {key: value}} of the default experiment's first STEPS steps, run in-process in `run_dir`."""
    from rlx.train import run
    from tests.conftest import compose, read_metrics

    run(compose(OVERRIDES), run_dir)
    rows = read_metrics(run_dir)
    return {str(r["step"]): {k: float(r[k]) for k in KEYS if k in r} for r in rows}


def compare(got: dict, ref: dict, tol: dict) -> list[str]:
    """'step S key: got X, reference Y (allowed +-T)' for every value outside the tolerance, and any step or
    key one side lacks."""
    bad = [f"steps {sorted(got)} != reference {sorted(ref)}"] if sorted(got) != sorted(ref) else []
    for step in sorted(ref, key=int):
        for key, want in ref[step].items():
            have = got.get(step, {}).get(key)
            allowed = tol["atol"][key] + tol["rtol"] * abs(want)
            if have is None or not math.isfinite(have) or abs(have - want) > allowed:
                bad.append(f"step {step} {key}: got {have}, reference {want} (allowed +-{allowed:.3g})")
        extra = set(got.get(step, {})) - set(ref[step])
        if extra:
            bad.append(f"step {step}: keys {sorted(extra)} are not in the reference")
    return bad


def main() -> None:
    import torch

    from rlx.run.device import cpu_bf16_flags
    from rlx.run.logging import git_sha

    with tempfile.TemporaryDirectory() as tmp:
        steps = trajectory(Path(tmp) / "run")
    out = {"version": VERSION, "what": "python -m rlx.train " + " ".join(OVERRIDES) + " (the default experiment)",
           "regenerate": "python -m tests.regression.reference", "tolerance": TOLERANCE, "steps": steps,
           "written_on": {"git_sha": git_sha(Path(__file__).parents[2]), "torch": torch.__version__,
                          "python": sys.version.split()[0], "machine": platform.machine(),
                          "cpu_bf16": cpu_bf16_flags()}}
    REFERENCE.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {REFERENCE}: {len(steps)} rows")


if __name__ == "__main__":
    main()
