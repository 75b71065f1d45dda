"""The default experiment's first steps are pinned: loss, gradient norm, reward, entropy and held-out
accuracy equal tests/regression/reference_default.json within its tolerance. A change that moves them on
purpose regenerates the file in the same commit (`python -m tests.regression.reference`; reference.py says
what runs)."""

from __future__ import annotations

import json

from tests.regression.reference import KEYS, REFERENCE, STEPS, VERSION, compare, trajectory


def test_the_default_experiment_follows_its_pinned_trajectory(tmp_path):
    ref = json.loads(REFERENCE.read_text())
    assert ref["version"] == VERSION and set(ref["steps"]) == {str(s) for s in range(STEPS + 1)}
    assert all(k in ref["steps"]["1"] for k in KEYS if k != "val/acc") and "val/acc" in ref["steps"]["0"]
    bad = compare(trajectory(tmp_path / "run"), ref["steps"], ref["tolerance"])
    assert not bad, ("the default experiment left its pinned trajectory:\n  " + "\n  ".join(bad) +
                     "\nIf this change moves the numbers on purpose, regenerate the reference in the same commit: "
                     "python -m tests.regression.reference")


def test_compare_names_what_moved():
    ref = {"1": {"actor/loss": 0.02, "train/reward/mean": 0.0625}}
    tol = {"rtol": 0.02, "atol": {"actor/loss": 1e-3, "train/reward/mean": 1 / 64}}
    assert compare({"1": {"actor/loss": 0.0205, "train/reward/mean": 0.07}}, ref, tol) == []
    bad = compare({"1": {"actor/loss": -0.02, "train/reward/mean": 1.0}}, ref, tol)
    assert [b.split(":")[0] for b in bad] == ["step 1 actor/loss", "step 1 train/reward/mean"]
    assert compare({}, ref, tol)[0].startswith("steps [] != reference ['1']")
    assert "nan" in compare({"1": {"actor/loss": float("nan"), "train/reward/mean": 0.0625}}, ref, tol)[0]
