"""Shared fixtures: compose the real Hydra config at tiny size and run experiments in-process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlx.run.records import read_metrics  # noqa: F401  (the tests read runs through the one reader)
from tests import tiers, tiny

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

# A model and experiment small enough for many end-to-end runs in the suite.
TINY = [
    "model.hidden_size=32",
    "model.intermediate_size=64",
    "model.num_layers=2",
    "model.num_heads=2",
    "model.num_kv_heads=1",
    "model.sft.steps=30",
    "model.lora.r=4",
    "model.lora.alpha=8",
    "task.n_train=200",
    "task.n_eval=16",
    "rollout.group_size=4",
    "rollout.prompts_per_step=4",
    "rollout.eval_k=2",
    "train.steps=4",
    "train.eval_every=2",
    "train.ckpt_every=2",
    "train.progress=false",
    "logger.mode=disabled",
    "trainer.threads=1",  # bitwise-reproducible reductions whatever the machine load
]


def pytest_configure(config):
    tiers.install()
    # each xdist worker takes its share of the cores, set before the workers start so that every library in them
    # (torch, vLLM's engines, numpy's BLAS) reads it at import. At 2 threads per worker on 2 cores they
    # oversubscribed the cores, and in-process vLLM engines waited in OpenMP's barriers (docs/README.md, Tests)
    workers = getattr(config.option, "numprocesses", None) or 1
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // int(workers))))


def pytest_collection_modifyitems(config, items):
    """`slow` tests run only when the mark expression names them (`pytest -m slow`), whatever else it says,
    so `pytest -m "not integration"` keeps them out as the plain `pytest` does."""
    if "slow" in (config.option.markexpr or ""):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    tiers.enter(item)  # module- and session-scoped fixtures set up here too: they count as the test's
    try:
        result = yield
    finally:
        tiers.leave()
    tiers.check()
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    tiers.enter(item)
    try:
        result = yield
    finally:
        tiers.leave()
    tiers.check()
    return result


@pytest.fixture(scope="session", autouse=True)
def _shared_cache(tmp_path_factory):
    """One SFT-base cache for the whole session (and its subprocesses), shared by the xdist workers: a base two
    workers need is built once (rlx publishes it atomically; a concurrent builder's identical copy is used)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's directory, above each worker's popen-gwN
    cache = root / "rlx_cache"
    cache.mkdir(exist_ok=True)
    os.environ.setdefault("RLX_CACHE", str(cache))
    os.environ.setdefault("WANDB_SILENT", "true")
    yield


@pytest.fixture(scope="session")
def make_tiny_model():
    """tests.tiny.tiny_qwen2(seed, dtype, tok, **Qwen2Config keys): the suite's one tiny-model builder."""
    return tiny.tiny_qwen2


@pytest.fixture
def tiny_lora_policy(tmp_path):
    """(policy, tok) of tests.tiny.tiny_policy, its base saved in tmp_path / "policy"."""
    return tiny.tiny_policy(tmp_path / "policy")


def compose(overrides: list[str] | None = None):
    from hydra import compose as hcompose
    from hydra import initialize_config_dir

    import rlx.config  # noqa: F401  (registers the schemas in the ConfigStore)

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return hcompose(config_name="config", overrides=list(overrides or []))


def run_tiny(run_dir: Path, overrides: list[str] | None = None) -> dict:
    from rlx.train import run

    cfg = compose(TINY + list(overrides or []))
    return run(cfg, run_dir)


def strip_timing(rows: list[dict]) -> list[dict]:
    from rlx.train import TIMING_PREFIXES

    return [{k: v for k, v in r.items() if not k.startswith(TIMING_PREFIXES)} for r in rows]


def kill_and_rerun(run_dir: Path, overrides: list[str], first_ckpt: str = "step_2", last_ckpt: str = "step_6") -> None:
    """Start `python -m rlx.train` (TINY + overrides), kill -9 it once `first_ckpt` exists, then rerun
    the same command to the end (it resumes from the checkpoint)."""
    import signal
    import subprocess
    import sys
    import time

    cmd = [sys.executable, "-m", "rlx.train", *TINY, *overrides, f"hydra.run.dir={run_dir}"]
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not (Path(run_dir) / "ckpt" / first_ckpt).exists():
        assert p.poll() is None, "run ended before its first checkpoint"
        assert time.time() < deadline
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert not (Path(run_dir) / "ckpt" / last_ckpt).exists()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
