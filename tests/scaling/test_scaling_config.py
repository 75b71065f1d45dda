"""conf/scaling/*.yaml against the ScalingConfig schema, and option validation."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rlx.scaling import FITTERS, ScalingConfig
from rlx.scaling.config import as_config

CONF = Path(__file__).resolve().parents[2] / "conf" / "scaling"


@pytest.mark.parametrize("name", ["none", "sigmoid", "power"])
def test_each_option_file_merges_into_the_schema_and_validates(name):
    node = OmegaConf.merge(OmegaConf.structured(ScalingConfig), OmegaConf.load(CONF / f"{name}.yaml"))
    cfg = as_config(node)  # an OmegaConf node is accepted as is
    assert cfg.fit == name
    assert name == "none" or name in FITTERS


@pytest.mark.parametrize(
    "override, match",
    [
        ({"compute": "joules"}, "unknown scaling.compute"),
        ({"fit": "cubic"}, "unknown scaling.fit"),
        ({"fit_fraction": 0.0}, "fit_fraction"),
        ({"bootstrap": -1}, ">= 0"),
    ],
)
def test_bad_options_are_rejected(override, match):
    with pytest.raises(ValueError, match=match):
        as_config({**{"fit": "sigmoid"}, **override})
