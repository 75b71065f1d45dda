"""Config files, registry and the errors bad settings raise."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rlx.extrapolation import EXTRAPOLATORS, ExtrapolationConfig, build_extrapolator

CONF = Path(__file__).resolve().parents[2] / "conf" / "extrapolation"


@pytest.mark.parametrize("name", ["none", "linear", "next"])
def test_conf_files_validate_against_the_schema(name):
    cfg = OmegaConf.merge(OmegaConf.structured(ExtrapolationConfig), OmegaConf.load(CONF / f"{name}.yaml"))
    assert cfg.type == name
    ext = build_extrapolator(cfg, total_steps=200)  # the default experiment's length
    if name == "none":
        assert ext is None
    else:
        assert isinstance(ext, EXTRAPOLATORS[name]) and ext.extend_at == list(cfg.extend_at) == [30]


@pytest.mark.parametrize(
    "kw,total,match",
    [
        (dict(type="bogus"), 100, "must be one of"),
        (dict(type="next", extend_at=[]), 100, "needs at least one step"),
        (dict(type="linear", extend_at=[120]), 100, "outside"),
        (dict(type="next", extend_at=[55]), 100, "not multiples of interval"),
        (dict(type="next", extend_at=[40]), 100, "no training pair"),
        (dict(type="next", extend_at=[60], horizon=25), 100, "multiple of interval"),
        (dict(type="next", extend_at=[60], epochs=0), 100, "bad predictor settings"),
    ],
)
def test_bad_settings_raise(kw, total, match):
    with pytest.raises(ValueError, match=match):
        build_extrapolator(ExtrapolationConfig(**kw), total_steps=total)


def test_first_observe_must_be_step_zero(make_policy):
    ext = build_extrapolator(ExtrapolationConfig(type="linear", extend_at=[5]), total_steps=10)
    with pytest.raises(ValueError, match="before training"):
        ext.observe(make_policy(), 3, None)


def test_model_without_lora_is_rejected():
    from torch import nn

    ext = build_extrapolator(ExtrapolationConfig(type="linear", extend_at=[5]), total_steps=10)
    with pytest.raises(ValueError, match="no LoRA modules"):
        ext.observe(nn.Linear(4, 4), 0, None)


def test_the_config_names_every_registered_extrapolator():
    from rlx.extrapolation.config import TYPES

    assert set(TYPES) == {"none", *EXTRAPOLATORS}
