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
    from rlx.run.device import auto_dtype

    t = resolve(trainer_cfg(device="auto"))
    assert t.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert t.dtype_name == auto_dtype(t.device)[0] and t.dtype_why.startswith("auto: ")
    assert resolve(trainer_cfg(device="auto", dtype="fp32")).dtype == torch.float32


@pytest.mark.parametrize("flags, want", [([], "fp32"), (["avx512_bf16"], "bf16"), (["amx_bf16"], "bf16"),
                                         (["avx512_bf16", "amx_bf16"], "bf16"), (["bf16"], "bf16"),
                                         (["unknown"], "fp32")])
def test_auto_dtype_on_a_cpu_is_bf16_only_with_bf16_instructions(monkeypatch, capsys, flags, want):
    import rlx.run.device as device

    monkeypatch.setattr(device, "cpu_bf16_flags", lambda: flags)
    spec = resolve(trainer_cfg(device="cpu"))  # the default is auto
    assert TrainerConfig().dtype == "auto" and spec.dtype_name == want
    assert spec.dtype == {"fp32": torch.float32, "bf16": torch.bfloat16}[want]
    assert "emulated" not in capsys.readouterr().out  # auto never picks an emulated bf16
    for f in flags if want == "bf16" else []:
        assert f in spec.dtype_why


@pytest.mark.parametrize("bf16_gpu, want", [(True, "bf16"), (False, "fp32")])
def test_auto_dtype_on_a_gpu_is_bf16_where_the_gpu_has_it(monkeypatch, bf16_gpu, want):
    import rlx.run.device as device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16_gpu)
    monkeypatch.setattr(device, "cpu_bf16_flags", lambda: [])  # not read for a GPU
    spec = resolve(trainer_cfg(device="auto"))
    assert spec.device.type == "cuda" and spec.dtype_name == want
    monkeypatch.setattr(device, "cpu_bf16_flags", lambda: ["avx512_bf16"])
    assert resolve(trainer_cfg(device="cpu")).dtype_name == "bf16"  # trainer.device=cpu on a GPU machine: the CPU's


@pytest.mark.parametrize("flags, want", [([], "fp32"), (["avx512_bf16"], "bf16")])
def test_preflight_writes_the_resolved_dtype_into_the_config(monkeypatch, flags, want):
    """What every reader after preflight sees (engine checks, recorded configs): never auto. The README's
    SmolLM2 command (experiment=smollm2_wordproblems) runs fp32 on an AVX2-only CPU."""
    import rlx.run.device as device
    from rlx.config.preflight import record_dtype
    from tests.conftest import TINY, compose

    monkeypatch.setattr(device, "cpu_bf16_flags", lambda: flags)
    for over in ([], ["experiment=smollm2_wordproblems"], ["experiment=smollm2_gsm8k"]):
        cfg = compose(TINY + over + ["trainer.device=cpu", "trainer.dtype=auto"])  # the tiny model pins fp32
        assert cfg.trainer.dtype == "auto"
        spec = resolve(cfg.trainer)
        record_dtype(cfg, spec)
        assert cfg.trainer.dtype == want == spec.dtype_name
    cfg = compose(TINY + ["trainer.dtype=bf16", "trainer.device=cpu"])
    record_dtype(cfg, resolve(cfg.trainer))
    assert cfg.trainer.dtype == "bf16"  # a dtype that is set stays set (bf16 on AVX2: warned, not changed)


@pytest.mark.integration
def test_a_run_moved_to_a_cpu_where_auto_picks_another_dtype_is_refused_naming_both(tmp_path, monkeypatch):
    """trainer.dtype=auto on an avx512_bf16 CPU runs bf16 and records it; resumed on an AVX2-only CPU, where
    auto picks fp32, the run is refused naming both dtypes and both machines; trainer.dtype=bf16 keeps it."""
    import json

    import rlx.run.device as device
    from rlx.run.checkpoint import read_state

    monkeypatch.setattr(device, "cpu_bf16_flags", lambda: ["avx512_bf16"])
    run_tiny(tmp_path, EASY + ["train.steps=2", "trainer.dtype=auto"])  # auto over the tiny model's fp32 pin
    state = read_state(tmp_path / "ckpt" / "step_2")
    assert state["config"]["trainer"]["dtype"] == "bf16"
    assert state["dtype"] == {"dtype": "bf16", "device": "cpu", "cpu_bf16": ["avx512_bf16"]}
    assert json.loads((tmp_path / "summary.json").read_text())["config"]["trainer"]["dtype"] == "bf16"
    monkeypatch.setattr(device, "cpu_bf16_flags", lambda: [])  # the same run dir on an AVX2-only machine
    with pytest.raises(ValueError) as e:
        run_tiny(tmp_path, EASY + ["train.steps=3", "trainer.dtype=auto"])
    msg = str(e.value)
    assert "this run computed in trainer.dtype=bf16 (as recorded; on a CPU with avx512_bf16)" in msg
    assert "this launch would compute in trainer.dtype=fp32" in msg and "auto picks fp32" in msg
    assert "rerun with trainer.dtype=bf16 (emulated on this CPU" in msg and "start a new run" in msg
    with pytest.raises(ValueError, match=r"trainer.dtype=bf16 .* trainer.dtype=fp32"):
        run_tiny(tmp_path, EASY + ["train.steps=3", "trainer.dtype=fp32"])  # an explicit other dtype: the same
    s = run_tiny(tmp_path, EASY + ["train.steps=3", "trainer.dtype=bf16"])  # keep it: resumes at step 2
    assert s["status"] == "finished" and [r["step"] for r in read_metrics(tmp_path)] == [0, 1, 2, 3]


@pytest.mark.integration
def test_a_finished_run_rerun_where_auto_picks_another_dtype_is_refused(tmp_path, monkeypatch):
    import shutil

    import rlx.run.device as device

    monkeypatch.setattr(device, "cpu_bf16_flags", lambda: [])
    auto = EASY + ["train.steps=1", "train.eval_every=1", "trainer.dtype=auto"]
    run_tiny(tmp_path, auto)  # auto -> fp32
    shutil.rmtree(tmp_path / "ckpt")  # removed once the run finished: summary.json is the record
    monkeypatch.setattr(device, "cpu_bf16_flags", lambda: ["amx_bf16"])
    with pytest.raises(ValueError, match=r"a finished run.*trainer.dtype=fp32 .*trainer.dtype=bf16.*rerun with "
                                         r"trainer.dtype=fp32"):
        run_tiny(tmp_path, auto)
    assert run_tiny(tmp_path, EASY + ["train.steps=1", "train.eval_every=1", "trainer.dtype=fp32"])["status"] == "finished"


def test_fp32_autocast_is_a_no_op_and_bf16_computes_in_bf16():
    x = torch.randn(4, 8)
    lin = torch.nn.Linear(8, 3)
    with autocast(resolve(trainer_cfg(dtype="fp32"))):
        assert lin(x).dtype == torch.float32
    with autocast(resolve(trainer_cfg(dtype="bf16"))):
        assert lin(x).dtype == torch.bfloat16
    assert lin.weight.dtype == torch.float32  # parameters keep their dtype


@pytest.mark.integration
def test_bf16_run_finishes_and_logs_the_mismatch(tmp_path):
    """(The bf16 mismatch itself is bounded per engine in tests/rollout/test_conformance.py.)"""
    s = run_tiny(tmp_path / "bf16", EASY + ["trainer.dtype=bf16", "train.steps=2"])
    assert s["status"] == "finished"
    rows = [r for r in read_metrics(tmp_path / "bf16") if r["step"] > 0]
    assert all(0 <= r["rollout/logprob_diff/mean"] <= r["rollout/logprob_diff/max"] < 1.0 for r in rows)


@pytest.mark.integration
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


@pytest.mark.parametrize("record, machine", [({"dtype": "bf16", "device": "cuda", "gpu": "NVIDIA H200", "cpu_bf16": []},
                                              "a GPU (NVIDIA H200)"),
                                             ({"dtype": "bf16", "device": "cpu", "cpu_bf16": ["unknown"]},
                                              "a CPU whose bf16 instructions were not read"),
                                             (None, "a machine whose bf16 support was not recorded")])
def test_the_dtype_refusal_names_both_dtypes_and_both_machines(monkeypatch, record, machine):
    """A GPU run's checkpoint (or one from before dtype records) resumed on an AVX2-only CPU."""
    import rlx.run.device as device
    from rlx.run.resume import dtype_refusal
    from tests.conftest import TINY, compose

    monkeypatch.setattr(device, "cpu_bf16_flags", lambda: [])
    cfg = compose(TINY + ["trainer.dtype=fp32", "trainer.device=cpu"])
    msg = dtype_refusal("here", {"trainer": {"dtype": "bf16"}}, cfg, record, ["algo.lr: 0.001 -> 0.01"])
    assert msg.startswith(f"here: this run computed in trainer.dtype=bf16 (as recorded; on {machine}) and this launch "
                          f"would compute in trainer.dtype=fp32 (on this machine trainer.dtype=auto picks fp32: a CPU "
                          f"without bf16 instructions")
    assert "The config differs in algo.lr: 0.001 -> 0.01 as well." in msg
    assert "To keep bf16, rerun with trainer.dtype=bf16 (emulated on this CPU" in msg
