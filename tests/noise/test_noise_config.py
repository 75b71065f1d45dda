"""conf/noise/*.yaml validate against NoiseConfig and build what they name."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from rlx.noise import NoiseConfig, NoiseInjector, build_noise, sigma_at

CONF = Path(__file__).resolve().parents[2] / "conf" / "noise"


def load(name: str):
    return OmegaConf.merge(OmegaConf.structured(NoiseConfig), OmegaConf.load(CONF / f"{name}.yaml"))


def test_none_builds_nothing():
    assert build_noise(load("none"), total_steps=100, seed=0) is None


def test_aqn_yaml_holds_the_paper_defaults_and_builds_an_injector():
    cfg = load("aqn")
    assert (cfg.type, cfg.schedule, cfg.stages) == ("aqn", "exponential", 10)
    assert isinstance(cfg.sigma_start, float) and cfg.sigma_start == 1e-2
    assert isinstance(cfg.sigma_end, float) and cfg.sigma_end == 5e-4
    assert list(cfg.targets) == ["input_layernorm", "post_attention_layernorm"]
    assert cfg.include_final_norm is False and cfg.apply_in_train_forward is False
    assert isinstance(build_noise(cfg, total_steps=100, seed=0), NoiseInjector)
    assert sigma_at(99, 100, cfg) == (5e-4, 9)  # DictConfig works as the schema object


def test_schema_rejects_a_mistyped_field():
    cfg = load("aqn")
    with pytest.raises(ValidationError):
        cfg.stages = "ten"


def test_the_config_names_every_registered_type_and_schedule():
    """NoiseConfig checks names from its own lists (it imports nothing from rlx): they are the registries'."""
    from rlx.noise import NOISE_TYPES, SCHEDULES
    from rlx.noise.config import NOISE_TYPE_NAMES, SCHEDULE_NAMES

    assert set(NOISE_TYPE_NAMES) == set(NOISE_TYPES) and set(SCHEDULE_NAMES) == set(SCHEDULES)
