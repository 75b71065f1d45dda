"""Reruns never duplicate or destroy results: no checkpoint yet, resume=never, a changed config."""

import json

import pytest

from rlx.run.lock import LOCK

from tests.conftest import read_metrics, run_tiny
from tests.faults import fail_overrides

EASY = ["task.num_terms=2", "task.max_operand=6", "task.n_train=60", "task.n_eval=12", "model.sft.steps=60"]


@pytest.mark.integration
def test_rerun_before_the_first_checkpoint_logs_each_step_once_and_keeps_the_old_rows(tmp_path):
    with pytest.raises(RuntimeError, match="forced failure"):  # a crash at step 3, before any checkpoint
        run_tiny(tmp_path, EASY + ["train.steps=4", "train.ckpt_every=4"] + fail_overrides(3))
    first = read_metrics(tmp_path)
    assert [r["step"] for r in first] == [0, 1, 2] and not (tmp_path / "ckpt").exists()
    run_tiny(tmp_path, EASY + ["train.steps=4", "train.ckpt_every=4"])
    assert [r["step"] for r in read_metrics(tmp_path)] == [0, 1, 2, 3, 4]  # each step once
    kept = [json.loads(x) for x in (tmp_path / "metrics.prev-1.jsonl").read_text().splitlines()]
    assert kept == first  # the earlier rows are not lost


@pytest.mark.integration
def test_resume_never_over_existing_checkpoints_is_refused_before_building(tmp_path):
    run_tiny(tmp_path, EASY + ["train.steps=2"])
    before = (tmp_path / "metrics.jsonl").read_text()
    with pytest.raises(ValueError, match=r"train.resume=never but .*ckpt holds checkpoints \[2\]"):
        run_tiny(tmp_path, EASY + ["train.steps=2", "train.resume=never"])
    assert (tmp_path / "metrics.jsonl").read_text() == before and (tmp_path / "ckpt" / "step_2").is_dir()


@pytest.mark.integration
def test_resume_with_a_changed_setting_is_refused_naming_it(tmp_path):
    run_tiny(tmp_path, EASY + ["train.steps=2"])
    with pytest.raises(ValueError, match=r"algo.lr: 0.001 -> 0.01"):
        run_tiny(tmp_path, EASY + ["train.steps=4", "algo.lr=0.01"])
    # budget, intervals and evaluation's chunking may change
    run_tiny(tmp_path, EASY + ["train.steps=4", "train.eval_every=1", "rollout.eval_chunk=3"])
    assert [r["step"] for r in read_metrics(tmp_path)] == [0, 1, 2, 3, 4]


def test_keys_that_change_no_number_may_change_or_appear_at_resume():
    from omegaconf import OmegaConf

    from rlx.run.resume import config_changes
    from tests.conftest import TINY, compose

    cfg = compose(TINY)
    saved = OmegaConf.to_container(cfg, resolve=True)
    del saved["rollout"]["eval_chunk"]  # a run started before the key existed
    assert config_changes(saved, compose(TINY + ["rollout.eval_chunk=3"])) == []  # chunking changes no sample
    assert config_changes(saved, cfg) == []
    # an evaluation *sampling* key changes val/* from the resume on: still refused, a key the run's config
    # lacks included (a missing key reads as None, so only one whose value is not None shows as '<unset>')
    del saved["rollout"]["eval_k"]
    assert config_changes(saved, cfg) == ["rollout.eval_k: '<unset>' -> 2"]  # TINY's rollout.eval_k=2
    saved["rollout"]["eval_k"], saved["rollout"]["eval_top_p"] = 2, 0.9
    assert config_changes(saved, cfg) == ["rollout.eval_top_p: 0.9 -> None"]


def test_a_run_on_another_engine_resumes_across_the_server_engine_keys():
    """rollout.server.* (added after runs had started) is read only by rollout=vllm_server: an hf or vllm run
    from before it resumes; a server run compares them like any key."""
    from omegaconf import OmegaConf

    from rlx.run.resume import config_changes
    from tests.conftest import TINY, compose

    cfg = compose(TINY)
    saved = OmegaConf.to_container(cfg, resolve=True)
    del saved["rollout"]["server"]  # a run started before the keys existed
    assert config_changes(saved, compose(TINY + ["rollout.server.threads=4"])) == []
    server = compose(TINY + ["rollout=vllm_server"])
    saved = OmegaConf.to_container(server, resolve=True)
    assert config_changes(saved, compose(TINY + ["rollout=vllm_server", "rollout.server.threads=4"])) == [
        "rollout.server.threads: 1 -> 4"]


@pytest.mark.integration
@pytest.mark.parametrize("how", ["enospc", "torch_zip_writer"])
def test_disk_full_during_a_save_says_so_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch, how):
    import errno
    from collections import namedtuple

    import torch

    import rlx.run.checkpoint as C

    run_tiny(tmp_path, EASY + ["train.steps=2"])
    real_save = torch.save

    def full(obj, f, *a, **k):
        if how == "enospc":
            raise OSError(errno.ENOSPC, "No space left on device")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")

    monkeypatch.setattr(C.torch, "save", full)
    if how == "torch_zip_writer":  # what a full disk looks like to the check
        usage = namedtuple("usage", "total used free")
        monkeypatch.setattr(C.shutil, "disk_usage", lambda p: usage(10 << 20, 10 << 20, 4096))
    with pytest.raises(OSError, match="no space left on device while writing checkpoint step_4") as e:
        run_tiny(tmp_path, EASY + ["train.steps=4"])
    assert e.value.errno == errno.ENOSPC and "step_2" in str(e.value)
    monkeypatch.setattr(C.torch, "save", real_save)
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step_2"]  # no half-written folder


@pytest.mark.integration
def test_kill_9_before_the_first_checkpoint_then_rerun(tmp_path):
    """A real process killed -9 after logging step 1 but before any checkpoint; the rerun starts over,
    logs each step once, keeps the killed start's rows aside, and equals an uninterrupted run."""
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import ROOT, TINY, strip_timing

    over = EASY + ["train.steps=8", "train.ckpt_every=8"]  # killed long before the only checkpoint
    run_tiny(tmp_path / "ref", over)
    run_dir = tmp_path / "killed"
    cmd = [sys.executable, "-m", "rlx.train", *TINY, *over, f"hydra.run.dir={run_dir}"]
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not ((run_dir / "metrics.jsonl").exists() and '"step": 1' in (run_dir / "metrics.jsonl").read_text()):
        assert p.poll() is None and time.time() < deadline
        time.sleep(0.02)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert not (run_dir / "ckpt").exists() or not any((run_dir / "ckpt").glob("step_*"))
    run_tiny(run_dir, over)  # the same config again, in this process
    assert strip_timing(read_metrics(run_dir)) == strip_timing(read_metrics(tmp_path / "ref"))
    assert (run_dir / "metrics.prev-1.jsonl").exists()


@pytest.mark.integration
def test_kill_9_during_a_checkpoint_write_then_rerun(tmp_path):
    """What a kill -9 in the middle of a save leaves (a temp folder with part of the files) is never
    taken for a checkpoint: the rerun resumes from the last complete one, removes the debris and
    equals an uninterrupted run."""
    import shutil

    from tests.conftest import strip_timing

    run_tiny(tmp_path / "ref", EASY + ["train.steps=6"])
    run = tmp_path / "run"
    run_tiny(run, EASY + ["train.steps=4"])
    debris = run / "ckpt" / ".tmp-step_6-x1"
    shutil.copytree(run / "ckpt" / "step_4" / "adapter", debris / "adapter")  # killed before trainer_state.pt
    (run / "metrics.jsonl").write_text((run / "metrics.jsonl").read_text() + '{"step": 5, "train/rew')  # mid-line
    run_tiny(run, EASY + ["train.steps=6"])
    assert strip_timing(read_metrics(run)) == strip_timing(read_metrics(tmp_path / "ref"))
    assert not debris.exists() and sorted(p.name for p in (run / "ckpt").iterdir()) == ["step_4", "step_6"]


@pytest.mark.integration
def test_refused_resume_leaves_the_recorded_config_as_what_ran(tmp_path):
    import subprocess
    import sys

    import yaml

    from tests.conftest import ROOT, TINY

    cmd = [sys.executable, "-m", "rlx.train", *TINY, *EASY, f"hydra.run.dir={tmp_path}"]
    subprocess.run(cmd + ["train.steps=2"], cwd=ROOT, check=True, capture_output=True, timeout=300)
    r = subprocess.run(cmd + ["train.steps=4", "algo.lr=0.01"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "algo.lr: 0.001 -> 0.01" in r.stderr + r.stdout
    assert yaml.safe_load((tmp_path / ".hydra" / "config.yaml").read_text())["algo"]["lr"] == 0.001


@pytest.mark.integration
def test_a_finished_run_rerun_with_its_config_does_nothing_even_without_checkpoints(tmp_path, monkeypatch):
    import shutil

    run_tiny(tmp_path, EASY + ["train.steps=2"])
    shutil.rmtree(tmp_path / "ckpt")  # e.g. removed to save disk once the sweep finished
    results = lambda: {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file() and p.name != LOCK}  # noqa: E731
    files = results()  # (.rlx.lock names the process holding the directory: each run rewrites it)
    summary = json.loads(files["summary.json"])
    assert summary["status"] == "finished" and summary["config"]["train"]["steps"] == 2
    monkeypatch.setenv("RLX_CACHE", str(tmp_path / "fresh_cache"))
    again = run_tiny(tmp_path, EASY + ["train.steps=2", "train.eval_every=1"])  # a bookkeeping key may differ
    assert again == summary and not (tmp_path / "fresh_cache").exists()  # nothing was built
    assert results() == files  # nor rewritten
    # a longer budget or another setting is a run to do (here from scratch: no checkpoint is left)
    run_tiny(tmp_path, EASY + ["train.steps=3"])
    assert [r["step"] for r in read_metrics(tmp_path)] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match=r"algo.lr: 0.001 -> 0.01"):  # the new checkpoint's config is compared
        run_tiny(tmp_path, EASY + ["train.steps=3", "algo.lr=0.01"])


@pytest.mark.integration
def test_a_resumed_runs_wall_time_counts_its_earlier_process(tmp_path, monkeypatch):
    import time

    import rlx.train

    base_accuracy = rlx.train._base_accuracy

    def slow_base_accuracy(*a, **k):  # the first process spends 5 s more before step 1
        time.sleep(5.0)
        return base_accuracy(*a, **k)

    monkeypatch.setattr(rlx.train, "_base_accuracy", slow_base_accuracy)
    t0 = time.time()
    with pytest.raises(RuntimeError, match="forced failure"):  # checkpoint at step 2, crash at step 3
        run_tiny(tmp_path, EASY + ["train.steps=4", "train.ckpt_every=2"] + fail_overrides(3))
    first = time.time() - t0
    monkeypatch.setattr(rlx.train, "_base_accuracy", base_accuracy)
    t0 = time.time()
    summary = run_tiny(tmp_path, EASY + ["train.steps=4", "train.ckpt_every=2"])  # resumes at step 2
    second = time.time() - t0
    # the first process reached > 5 s by its step-2 checkpoint; the steps it did after it are not counted
    assert second + 4.5 < summary["wall_s"] < first + second
