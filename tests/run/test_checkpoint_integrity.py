"""Checkpoint and run-directory integrity: checksums, safe loading, fallback to an intact checkpoint,
no non-finite weights on disk, stale temp dirs, a half-written metrics.jsonl, an atomic summary.json."""

import json
import os
import random
import re
import shutil

import numpy as np
import pytest
import torch

from rlx.run import device as D
from rlx.run.checkpoint import CheckpointError, Checkpointer, CorruptCheckpointError, verify, write_manifest
from tests.conftest import compose, read_metrics, run_tiny, strip_timing, TINY
from tests.tiny import MINIMAL, tiny_qwen2

EASY = ["task.num_terms=2", "task.max_operand=6", "task.n_train=60", "task.n_eval=12", "model.sft.steps=60"]
ADAPTER = "adapter/adapter_model.safetensors"
STATE = "trainer_state.pt"


# ---- unit level: a tiny PEFT model and a trainer state shaped like the loop's -----------------------
@pytest.fixture
def policy():
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    return get_peft_model(tiny_qwen2(**MINIMAL), lora)


def _state(policy, step: int) -> dict:
    opt = torch.optim.AdamW([q for q in policy.parameters() if q.requires_grad], lr=1e-3)
    for q in opt.param_groups[0]["params"]:
        q.grad = torch.ones_like(q)
    opt.step()
    random.seed(step)
    np.random.seed(step)
    np.random.normal()  # a cached gaussian in numpy's state
    return {"step": step, "optimizer": opt.state_dict(), "rng": D.rng_state(), "task": {"epoch": 1, "pos": 3},
            "rollout_rng": torch.Generator().manual_seed(5).get_state(), "compute": {"flops": 1.5},
            "schedule": {"snapshots": {1: {"w": torch.ones(2)}}}, "extrapolator": {(4, 8): np.arange(3)}}


def _trainable(policy) -> dict:
    return {n: q.detach().clone() for n, q in policy.named_parameters() if q.requires_grad}


def _flip_bit(path, at: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    data[int(len(data) * at)] ^= 0x10
    path.write_bytes(bytes(data))


def test_manifest_checksums_every_file_and_state_loads_with_weights_only(tmp_path, policy):
    ck = Checkpointer(tmp_path / "ckpt")
    st = _state(policy, 3)
    path = ck.save(3, policy, st)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["step"] == 3 and {ADAPTER, STATE, "adapter/adapter_config.json"} <= set(manifest["files"])
    for rel, want in manifest["files"].items():
        assert (path / rel).stat().st_size == want["size"] and len(want["sha256"]) == 64
    torch.load(path / STATE, weights_only=True)  # plain tensors and containers only
    before = _trainable(policy)
    with torch.no_grad():
        for q in policy.parameters():
            q.add_(1.0) if q.requires_grad else None
    back = Checkpointer.load(path, policy)
    assert all(torch.equal(before[n], q) for n, q in _trainable(policy).items())
    # the RNG states round-trip exactly (numpy's as a uint32 array again, Python's as a tuple)
    assert back["rng"]["python"] == st["rng"]["python"] and isinstance(back["rng"]["python"], tuple)
    npy, npy0 = back["rng"]["numpy"], st["rng"]["numpy"]
    assert npy[0] == npy0[0] and npy[1].dtype == np.uint32 and np.array_equal(npy[1], npy0[1]) and npy[2:] == npy0[2:]
    np.random.set_state(npy)
    assert torch.equal(back["rng"]["torch"], st["rng"]["torch"]) and torch.equal(back["rollout_rng"], st["rollout_rng"])
    assert np.array_equal(back["extrapolator"][(4, 8)], np.arange(3)) and back["schedule"]["snapshots"][1]["w"].sum() == 2
    assert back["optimizer"]["state"].keys() == st["optimizer"]["state"].keys()


@pytest.mark.parametrize("rel", [ADAPTER, STATE])
def test_bit_flip_is_named_as_corrupt_and_leaves_the_model_untouched(tmp_path, policy, rel):
    path = Checkpointer(tmp_path / "ckpt").save(2, policy, _state(policy, 2))
    _flip_bit(path / rel)
    with torch.no_grad():
        for q in policy.parameters():
            q.mul_(2.0) if q.requires_grad else None
    before = _trainable(policy)
    with pytest.raises(CorruptCheckpointError, match=re.escape(f"{rel} is corrupt: sha256")):
        Checkpointer.load(path, policy)
    assert all(torch.equal(before[n], q) for n, q in _trainable(policy).items())


def test_checkpoint_without_manifest_is_refused(tmp_path, policy):
    """An older rlx wrote no manifest and pickled numpy's RNG state: refused, saying what to do."""
    st = _state(policy, 2)
    path = Checkpointer(tmp_path / "ckpt").save(2, policy, st)
    (path / "manifest.json").unlink()
    torch.save(st, path / STATE)  # the legacy format: a numpy array pickled as such
    with pytest.raises(CorruptCheckpointError, match=r"manifest\.json is missing: refusing .*Move it aside"):
        Checkpointer.load(path, policy)


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_pickle_that_runs_code_is_refused_and_never_runs(tmp_path, policy):
    marker = tmp_path / "pwned_marker"
    path = Checkpointer(tmp_path / "ckpt").save(2, policy, _state(policy, 2))
    torch.save({"step": 2, "task": _Evil(marker)}, path / STATE)
    write_manifest(path, 2)  # the checksums agree: only the unpickler stands between the file and the shell
    with pytest.raises(CorruptCheckpointError, match=r"trainer_state\.pt is unsafe or corrupt: torch\.load\(weights_only=True\) refused it .*system"):
        Checkpointer.load(path, policy)
    assert not marker.exists()


def test_state_that_weights_only_cannot_read_is_refused_at_save(tmp_path, policy):
    ck = Checkpointer(tmp_path / "ckpt")
    with pytest.raises(TypeError, match=r"state\['task'\]\['rng'\] is a builtins.object"):
        ck.save(2, policy, {"step": 2, "task": {"rng": object()}})
    assert not (tmp_path / "ckpt").exists()  # refused before anything was written


def test_non_finite_weight_is_never_checkpointed(tmp_path, policy):
    ck = Checkpointer(tmp_path / "ckpt")
    ck.save(1, policy, {"step": 1})
    name, q = [(n, q) for n, q in policy.named_parameters() if q.requires_grad][-1]
    with torch.no_grad():
        q.view(-1)[1] = float("inf")
    from rlx.run.checkpoint import NonFiniteError

    with pytest.raises(NonFiniteError, match=rf"step 2: trainable parameter {re.escape(name)} has 1 non-finite"):
        ck.save(2, policy, {"step": 2})
    assert ck.steps() == [1] and sorted(p.name for p in ck.root.iterdir()) == ["step_1"]
    verify(ck.root / "step_1")


def test_stale_temp_dirs_are_never_checkpoints_and_are_removed_on_save(tmp_path, policy):
    ck = Checkpointer(tmp_path / "ckpt")
    ck.save(2, policy, {"step": 2})
    shutil.copytree(ck.root / "step_2", ck.root / ".tmp-step_4-abc123")  # kill -9 right before the rename
    (ck.root / ".tmp-step_6-def456").mkdir()  # ... and right after mkdtemp
    assert ck.steps() == [2] and ck.latest() == ck.root / "step_2"
    assert ck.load_latest(policy, log=lambda m: None)[0] == ck.root / "step_2"
    logs = []
    ck.save(3, policy, {"step": 3}, log=logs.append)
    assert sorted(p.name for p in ck.root.iterdir()) == ["step_2", "step_3"]
    assert "removed 2 unfinished save(s)" in logs[0]


# ---- the real loop ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished 4-step run: ckpt/step_2 and ckpt/step_4."""
    d = tmp_path_factory.mktemp("ref") / "run"
    run_tiny(d, EASY)
    assert sorted(p.name for p in (d / "ckpt").iterdir()) == ["step_2", "step_4"]
    return d


def _bad_header(step_dir):
    f = step_dir / ADAPTER
    data = bytearray(f.read_bytes())
    data[:8] = (10**12).to_bytes(8, "little")  # a header length past the end of the file
    f.write_bytes(bytes(data))
    write_manifest(step_dir, 4)  # written bad: the checksums agree, the file still does not parse


CORRUPTIONS = {
    "bit_flip": (lambda d: _flip_bit(d / ADAPTER), f"{ADAPTER} is corrupt: sha256"),
    "truncated": (lambda d: os.truncate(d / STATE, 100), f"{STATE} is corrupt: 100 bytes, manifest.json says"),
    "bad_header": (_bad_header, f"{ADAPTER} is corrupt: unreadable safetensors"),
    "missing": (lambda d: (d / STATE).unlink(), f"{STATE} is missing"),
}


@pytest.mark.integration
@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_corrupt_newest_checkpoint_resumes_from_older_one(tmp_path, finished_run, capsys, kind):
    corrupt, why = CORRUPTIONS[kind]
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    corrupt(run / "ckpt/step_4")
    if kind == "bit_flip":  # and a save killed mid-way: never picked, removed by the next save
        shutil.copytree(finished_run / "ckpt/step_4", run / "ckpt/.tmp-step_6-x1")
    capsys.readouterr()
    run_tiny(run, EASY)  # same command: step_4 is bad, so it resumes from step_2 and redoes steps 3-4
    out = capsys.readouterr().out
    assert f"[resume] skipping checkpoint {run / 'ckpt/step_4'}: {why}" in out
    assert f"[resume] from {run / 'ckpt/step_2'} (step 2)" in out
    assert strip_timing(read_metrics(run)) == strip_timing(read_metrics(finished_run))
    assert sorted(p.name for p in (run / "ckpt").iterdir()) == ["step_2", "step_4"]
    verify(run / "ckpt/step_4")  # re-saved whole
    if kind == "bit_flip":
        assert "[ckpt] removed 1 unfinished save(s) left by an interrupted run: .tmp-step_6-x1" in out


@pytest.mark.integration
def test_all_checkpoints_corrupt_is_an_error_naming_each(tmp_path, finished_run):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    os.truncate(run / "ckpt/step_4" / STATE, 100)
    _flip_bit(run / "ckpt/step_2" / ADAPTER)
    metrics = (run / "metrics.jsonl").read_text()
    with pytest.raises(CheckpointError, match=rf"no intact checkpoint in .*tried 2: step_4: {STATE} is corrupt: 100 "
                                              rf"bytes.*; step_2: {re.escape(ADAPTER)} is corrupt: sha256.*Refusing to start from scratch"):
        run_tiny(run, EASY)
    assert (run / "metrics.jsonl").read_text() == metrics  # nothing started over


@pytest.mark.integration
def test_non_finite_update_is_refused_at_save_and_previous_checkpoint_kept(tmp_path, monkeypatch):
    """An update that leaves inf in one LoRA weight (as an lr blow-up does) is never written to disk."""
    import rlx.algo

    real, seen = rlx.algo.Update.__call__, {}

    def blow_up(self, policy, opt, shaped, dp, step):
        out = real(self, policy, opt, shaped, dp, step)
        if step == 3:
            name, q = [(n, q) for n, q in policy.named_parameters() if q.requires_grad][5]
            with torch.no_grad():
                q.view(-1)[0] = float("inf")
            seen["name"] = name
        return out

    monkeypatch.setattr(rlx.algo.Update, "__call__", blow_up)
    from rlx.run.checkpoint import NonFiniteError

    with pytest.raises(NonFiniteError, match=r"step 3: trainable parameter (\S+) has 1 non-finite") as e:
        run_tiny(tmp_path, EASY + ["train.ckpt_every=1"])
    assert seen["name"] in str(e.value) and "lora" in seen["name"]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step_1", "step_2"]
    verify(tmp_path / "ckpt/step_2")
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "failed"


# ---- metrics.jsonl and summary.json ---------------------------------------------------------------------
@pytest.mark.integration
def test_half_written_last_metrics_line_does_not_block_resume(tmp_path, finished_run, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    shutil.rmtree(run / "ckpt/step_4")  # killed during step 4's metrics write: the last checkpoint is step_2
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 5, "train/reward/mean": 0.2')  # a full disk / kill mid-line
    capsys.readouterr()
    run_tiny(run, EASY)
    out = capsys.readouterr().out
    assert re.search(rf"\[resume\] {re.escape(str(run / 'metrics.jsonl'))}: dropped an incomplete last line \(line 6, "
                     r"\d+ chars, no newline", out)
    assert strip_timing(read_metrics(run)) == strip_timing(read_metrics(finished_run))


def test_invalid_metrics_line_in_the_middle_is_an_error_naming_it(tmp_path):
    from rlx.run.logging import RunLogger
    from rlx.run.records import MetricsFileError

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0}\n{"step": 1, "a": \n{"step": 2}\n')
    cfg = compose(TINY)
    with pytest.raises(MetricsFileError, match=rf"{re.escape(str(path))}: line 2 is not valid JSON"):
        RunLogger(cfg, tmp_path, None, resume_step=1)
    assert path.read_text() == '{"step": 0}\n{"step": 1, "a": \n{"step": 2}\n'  # nothing dropped
    path.write_text('{"step": 0}\n{"step": 1}\n{"step": 2}\n{"st')
    RunLogger(cfg, tmp_path, None, resume_step=1)
    assert path.read_text() == '{"step": 0}\n{"step": 1}\n'


@pytest.mark.integration
def test_summary_json_is_replaced_atomically(tmp_path, monkeypatch):
    """A full disk while summary.json is written leaves the previous summary, never a truncated one."""
    import errno
    import pathlib

    run_tiny(tmp_path, EASY + ["train.steps=2"])
    old = (tmp_path / "summary.json").read_text()
    real = pathlib.Path.write_text

    def disk_full(self, data, *a, **k):
        if "summary.json" in self.name:
            real(self, data[: len(data) // 2], *a, **k)
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real(self, data, *a, **k)

    monkeypatch.setattr(pathlib.Path, "write_text", disk_full)
    with pytest.raises(OSError, match="No space left"):
        run_tiny(tmp_path, EASY + ["train.steps=3"])
    assert (tmp_path / "summary.json").read_text() == old and json.loads(old)["status"] == "finished"
    assert not [p.name for p in tmp_path.iterdir() if "summary.json" in p.name and p.name != "summary.json"]


# ---- round three (issue 31) -------------------------------------------------------------------------
def _poison(step_dir, step: int) -> str:
    """NaN in one adapter weight, with a manifest that matches (tampered, or an older rlx's save)."""
    from safetensors.torch import load_file, save_file

    f = step_dir / ADAPTER
    weights = load_file(str(f))
    name = sorted(weights)[0]
    weights[name].view(-1)[0] = float("nan")
    save_file(weights, str(f), metadata={"format": "pt"})
    write_manifest(step_dir, step)
    return name


def test_non_finite_adapter_weights_are_refused_on_load_and_the_model_left_untouched(tmp_path, policy):
    ck = Checkpointer(tmp_path / "ckpt")
    ck.save(2, policy, _state(policy, 2))
    ck.save(4, policy, _state(policy, 4))
    name = _poison(tmp_path / "ckpt/step_4", 4)
    verify(tmp_path / "ckpt/step_4")  # the checksums agree: only the values are wrong
    before = _trainable(policy)
    with pytest.raises(CorruptCheckpointError, match=rf"{re.escape(ADAPTER)} holds non-finite weights: "
                                                     rf"{re.escape(name)} has 1 nan/inf"):
        Checkpointer.load(tmp_path / "ckpt/step_4", policy)
    assert all(torch.equal(before[n], q) for n, q in _trainable(policy).items())
    logs = []
    path, state = ck.load_latest(policy, logs.append)
    assert path.name == "step_2" and state["step"] == 2 and "holds non-finite weights" in logs[0]


@pytest.mark.integration
def test_non_finite_newest_checkpoint_resumes_from_the_intact_one(tmp_path, finished_run, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    _poison(run / "ckpt/step_4", 4)
    capsys.readouterr()
    run_tiny(run, EASY)  # main: loaded the NaN and stopped at the next update with a non-finite loss
    out = capsys.readouterr().out
    assert f"[resume] skipping checkpoint {run / 'ckpt/step_4'}: {ADAPTER} holds non-finite weights" in out
    assert f"[resume] from {run / 'ckpt/step_2'} (step 2)" in out
    assert strip_timing(read_metrics(run)) == strip_timing(read_metrics(finished_run))


@pytest.mark.parametrize("bad,why", [
    (b'{"step": "1", "a": 1}', 'line 2 has step "1", not a whole number >= 0'),
    (b'{"step": null}', "line 2 has step null"),
    (b'{"step": 1e400}', "line 2 has step inf"),  # read as inf: main kept it, and step 1 vanished on resume
    (b'{"step": 1, "a\xff": 2}', r"line 2 is not valid UTF-8 \(byte 14\)"),  # 0-based; main: a garbage key
])
def test_malformed_middle_metrics_line_is_an_error_naming_file_and_line(tmp_path, bad, why):
    from rlx.run.logging import RunLogger
    from rlx.run.records import MetricsFileError
    from rlx.run.records import read_run

    path = tmp_path / "metrics.jsonl"
    body = b'{"step": 0}\n' + bad + b'\n{"step": 2}\n'
    path.write_bytes(body)
    with pytest.raises(MetricsFileError, match=rf"{re.escape(str(path))}: {why}"):
        RunLogger(compose(TINY), tmp_path, None, resume_step=1)
    assert path.read_bytes() == body  # nothing dropped
    run = read_run(tmp_path)  # a report over a damaged sweep skips it and counts it
    assert [r["step"] for r in run.records] == [0, 2] and run.skipped_lines == 1


@pytest.mark.integration
def test_full_disk_during_a_checkpoint_is_the_last_error_even_if_summary_json_fails_too(tmp_path, monkeypatch, capsys):
    import errno
    import pathlib

    real_save, real_write = torch.save, pathlib.Path.write_text

    def disk_full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    def summary_too(self, data, *a, **k):
        if "summary.json" in self.name:
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real_write(self, data, *a, **k)

    monkeypatch.setattr(torch, "save", disk_full)
    monkeypatch.setattr(pathlib.Path, "write_text", summary_too)
    with pytest.raises(OSError, match=r"no space left on device while writing checkpoint step_2 .*free some space "
                                      r"and rerun the same command to resume") as e:
        run_tiny(tmp_path, EASY + ["train.steps=2"])
    assert "summary.json" not in str(e.value)  # main: the summary's generic ENOSPC was the one raised
    assert "[run] summary.json could not be written either" in capsys.readouterr().out
    monkeypatch.setattr(torch, "save", real_save)
