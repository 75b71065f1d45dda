"""Every config file composes and validates; typos and wrong types fail before any work."""

import subprocess
import sys
import time

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from tests.conftest import CONF, ROOT, compose

GROUPS = ["model", "task", "rollout", "algo", "quant", "noise", "extrapolation", "scaling", "logger"]


def _options(group):
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("group", GROUPS)
def test_every_group_option_composes(group):
    opts = _options(group)
    assert opts, f"conf/{group} has no options"
    for opt in opts:
        cfg = compose([f"{group}={opt}"])
        OmegaConf.to_container(cfg, resolve=False, throw_on_missing=False)  # structure is valid
        assert cfg[group] is not None


def test_experiment_files_compose():
    for p in sorted((CONF / "experiment").glob("*.yaml")):
        cfg = compose([f"experiment={p.stem}"])
        assert cfg.seed is not None


def test_unknown_key_names_the_key():
    with pytest.raises(Exception) as e:
        compose(["algo.lrr=1"])
    assert "lrr" in str(e.value)


def test_wrong_type_names_the_key():
    with pytest.raises(Exception) as e:
        compose(["algo.lr=abc"])
    assert "lr" in str(e.value) and "abc" in str(e.value)


def test_schema_rejects_unknown_key_in_yaml(tmp_path):
    from rlx.config import RLXConfig

    schema = OmegaConf.structured(RLXConfig)
    with pytest.raises((ConfigKeyError, ValidationError)):
        OmegaConf.merge(schema, OmegaConf.create({"noise": {"sigma_strat": 0.1}}))


@pytest.mark.integration
@pytest.mark.parametrize("override,key", [("algo.lrr=1", "lrr"), ("algo.lr=abc", "algo.lr")])
def test_cli_fails_fast_naming_the_key(override, key, tmp_path):
    t = time.time()
    p = subprocess.run([sys.executable, "-m", "rlx.train", override, f"hydra.run.dir={tmp_path}/run"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert key in p.stderr, p.stderr[-2000:]
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # failed before any work


@pytest.fixture(scope="module")
def train_help():
    """What `python -m rlx.train --help` prints (one process start for the module's readers)."""
    p = subprocess.run([sys.executable, "-m", "rlx.train", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


@pytest.mark.integration
def test_help_lists_groups(train_help):
    for g in GROUPS:
        assert f"{g}:" in train_help
    assert "nvfp4" in train_help and "scalerl" in train_help


@pytest.mark.integration
def test_every_key_is_described_and_help_lists_them(train_help):
    import dataclasses

    from rlx.algo.config import AlgoConfig
    from rlx.config import describe_keys

    rows = describe_keys()
    assert len(rows) > 100 and [k for k, _, text in rows if not text] == []
    lr = next(f for f in dataclasses.fields(AlgoConfig) if f.name == "lr")  # the text is the field's own metadata
    assert ("algo.lr", 1e-3, lr.metadata["help"]) in rows and lr.metadata["help"] == "AdamW peak learning rate (>= 0)"
    out = train_help
    assert "== Keys ==" in out and "algo.lr = 0.001  # AdamW peak learning rate" in out
    assert "rollout.mode = 'sync'  # sync | stale | async" in out and "== Config ==" in out
