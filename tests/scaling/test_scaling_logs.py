"""Reading run directories: duplicate steps of a resumed run, broken lines, compute units, recipe grouping."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlx.run.records import find_runs, read_run
from rlx.scaling.grouping import evaluations, group_by_recipe, run_label

STEPS = np.arange(0, 50, 10)  # [5]
COMPUTE = STEPS * 2e12


def test_resumed_run_keeps_the_last_occurrence_of_a_step(tmp_path, make_run):
    reward = np.array([0.2, 0.3, 0.4, 0.5, 0.55])
    resumed = [  # killed after step 40's eval, resumed from step 20: steps 30, 40 logged again with new values
        {"step": 30, "val/acc": 0.41, "perf/compute/flops": 6.5e13},
        {"step": 31, "train/reward/mean": 0.4},
        {"step": 40, "val/acc": 0.52, "perf/compute/flops": 8.5e13},
    ]
    run = make_run(tmp_path / "r", STEPS, COMPUTE, reward, extra_lines=resumed)
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 41, "val/ac')  # half-written last line of a killed run
    log = read_run(run)
    s = evaluations(log, "val/acc", "flops")
    assert s.step.tolist() == [0, 10, 20, 30, 40]
    assert s.reward.tolist() == [0.2, 0.3, 0.4, 0.41, 0.52]
    assert s.compute.tolist() == [0.0, 2e13, 4e13, 6.5e13, 8.5e13]
    assert log.skipped_lines == 1 and log.last_step == 40


def test_compute_units_and_missing_unit(tmp_path, make_run):
    run = make_run(tmp_path / "r", STEPS, COMPUTE, np.linspace(0.2, 0.6, 5))
    log = read_run(run)
    assert evaluations(log, "val/acc", "tokens").compute.tolist() == (COMPUTE / 1e3).tolist()
    assert evaluations(log, "val/acc", "steps").compute.tolist() == STEPS.tolist()
    lines = [{"step": 0, "val/acc": 0.2}, {"step": 5, "val/acc": 0.3, "perf/compute/tokens": 10}]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    log = read_run(run)
    assert evaluations(log, "val/acc", "steps").compute.tolist() == [0, 5]  # the step itself when not logged
    with pytest.raises(ValueError, match="no 'perf/compute/flops'"):
        evaluations(log, "val/acc", "flops")
    with pytest.raises(ValueError, match="unknown compute unit"):
        evaluations(log, "val/acc", "joules")
    with pytest.raises(ValueError, match="no evaluation logs 'val/pass'"):
        evaluations(log, "val/pass", "steps")


def test_find_runs_at_any_depth(tmp_path, make_run):
    for rel in ("a/0", "a/1", "b/deep/2"):
        make_run(tmp_path / rel, STEPS, COMPUTE, np.linspace(0.2, 0.6, 5))
    assert [p.relative_to(tmp_path).as_posix() for p in find_runs(tmp_path)] == ["a/0", "a/1", "b/deep/2"]
    assert find_runs(tmp_path / "a" / "1") == [tmp_path / "a" / "1"]
    with pytest.raises(ValueError, match="no run directory"):
        find_runs(tmp_path / "a" / "1" / ".hydra")
    with pytest.raises(ValueError, match="no evaluation logs"):  # a directory above the runs logs nothing
        evaluations(read_run(tmp_path / "a"), "val/acc", "flops")


def test_runs_differing_only_by_seeds_form_one_recipe(sweep, make_run):
    # a fifth run: grpo again with another run seed and data seed -> still the grpo recipe
    steps = np.arange(0, 201, 5)  # the sweep's length (train.steps is part of a recipe)
    run = make_run(sweep / "4", steps, steps * 1e12, np.linspace(0.2, 0.6, steps.size), seed=7, algo="grpo")
    cfg = (run / ".hydra" / "config.yaml").read_text().replace("seed: 1234", "seed: 99")
    (run / ".hydra" / "config.yaml").write_text(cfg)
    runs = [read_run(p) for p in find_runs(sweep)]
    groups = group_by_recipe(runs, sweep)
    assert sorted(groups) == ["algo=cispo", "algo=grpo"]  # algo.loss differs too, but algo.name names the group
    assert sorted(p.path.name for p in groups["algo=grpo"]) == ["0", "1", "4"]
    assert run_label(groups["algo=cispo"][0], "algo=cispo", sweep) == "algo=cispo (seed=0)"


def test_single_recipe_is_labelled_by_its_algo(tmp_path, make_run):
    for i in range(2):
        make_run(tmp_path / str(i), STEPS, COMPUTE, np.linspace(0.2, 0.6, 5), seed=i, algo="dapo")
    runs = [read_run(p) for p in find_runs(tmp_path)]
    assert list(group_by_recipe(runs, tmp_path)) == ["dapo"]


def test_a_non_name_difference_is_shown(tmp_path, make_run):
    for i, loss in enumerate(("ppo_clip", "cispo")):
        make_run(tmp_path / str(i), STEPS, COMPUTE, np.linspace(0.2, 0.6, 5), algo="grpo", loss=loss)
    runs = [read_run(p) for p in find_runs(tmp_path)]
    assert sorted(group_by_recipe(runs, tmp_path)) == ["algo.loss=cispo", "algo.loss=ppo_clip"]
