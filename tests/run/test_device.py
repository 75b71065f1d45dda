"""trainer.device / dtype / threads: resolved and checked before any work; bf16 runs end to end;
perf/compute/gpu_hours counts devices x wall hours."""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf

from rlx.run.config import TrainerConfig
from rlx.run.device import autocast, resolve
from tests.conftest import read_metrics, run_tiny

EASY = ["task.num_terms=2", "task.max_operand=6", "task.n_train=60", "task.n_eval=12", "model.sft.steps=60"]


def trainer_cfg(**kw):
    return OmegaConf.structured(TrainerConfig(**kw))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cuda_without_cuda_fails_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setenv("RLX_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ValueError, match=r"trainer\.device=cuda.*no CUDA device"):
        run_tiny(tmp_path / "run", EASY + ["trainer.device=cuda"])
    assert not (tmp_path / "cache").exists() and not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.parametrize("kw,key", [({"device": "tpu"}, "trainer.device"), ({"dtype": "fp16"}, "trainer.dtype"),
                                    ({"threads": -2}, "trainer.threads")])
def test_bad_trainer_values_name_the_key(kw, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        resolve(trainer_cfg(**kw))


def test_auto_resolves_to_what_the_machine_has():
    t = resolve(trainer_cfg(device="auto"))
    assert t.device.type == ("cuda" if torch.cuda.is_available() else "cpu") and t.dtype == torch.float32


def test_fp32_autocast_is_a_no_op_and_bf16_computes_in_bf16():
    x = torch.randn(4, 8)
    lin = torch.nn.Linear(8, 3)
    with autocast(resolve(trainer_cfg(dtype="fp32"))):
        assert lin(x).dtype == torch.float32
    with autocast(resolve(trainer_cfg(dtype="bf16"))):
        assert lin(x).dtype == torch.bfloat16
    assert lin.weight.dtype == torch.float32  # parameters keep their dtype


def test_bf16_run_finishes_and_logs_the_mismatch(tmp_path):
    """(The bf16 mismatch itself is bounded per engine in tests/rollout/test_conformance.py.)"""
    s = run_tiny(tmp_path / "bf16", EASY + ["trainer.dtype=bf16", "train.steps=2"])
    assert s["status"] == "finished"
    rows = [r for r in read_metrics(tmp_path / "bf16") if r["step"] > 0]
    assert all(0 <= r["rollout/logprob_diff/mean"] <= r["rollout/logprob_diff/max"] < 1.0 for r in rows)


def test_gpu_hours_is_devices_times_wall_hours(tmp_path):
    s = run_tiny(tmp_path, EASY + ["train.steps=2"])
    summary = json.loads((tmp_path / "summary.json").read_text())
    hours = summary["perf/compute/gpu_hours"]
    assert 0 < hours <= s["wall_s"] / 3600.0  # one device; the clock starts after the build


@pytest.mark.parametrize("flags, native", [("fpu avx2 fma", []), ("avx2 avx512f avx512_bf16 amx_tile", ["avx512_bf16"]),
                                           ("fp asimd bf16 i8mm", ["bf16"])])
def test_cpu_bf16_flags_reads_the_native_instruction_sets(tmp_path, flags, native):
    from rlx.run.device import cpu_bf16_flags

    (tmp_path / "cpuinfo").write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    assert cpu_bf16_flags(str(tmp_path / "cpuinfo")) == native
    assert cpu_bf16_flags(str(tmp_path / "absent")) == ["unknown"]  # nothing to warn about


@pytest.mark.parametrize("flags, dtype, warned", [([], "bf16", True), (["amx_bf16"], "bf16", False),
                                                  ([], "fp32", False)])
def test_bf16_on_a_cpu_that_emulates_it_is_warned_at_resolve(monkeypatch, capsys, flags, dtype, warned):
    import rlx.run.device as device

    monkeypatch.setattr(device, "cpu_bf16_flags", lambda: flags)
    spec = resolve(trainer_cfg(device="cpu", dtype=dtype))
    assert spec.dtype == (torch.bfloat16 if dtype == "bf16" else torch.float32)  # a warning, not a refusal
    assert ("bf16 matmuls are emulated" in capsys.readouterr().out) == warned
