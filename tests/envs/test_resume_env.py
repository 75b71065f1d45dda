"""A run recorded before the env group existed resumes as env=none (rlx.run.resume.config_changes)."""

from omegaconf import OmegaConf

from rlx.run.resume import config_changes
from tests.conftest import compose


def test_a_config_recorded_without_env_is_single_turn():
    cfg = compose([])
    saved = OmegaConf.to_container(cfg, resolve=True)
    del saved["env"]
    assert config_changes(saved, cfg) == []
    changed = config_changes(saved, compose(["env=calculator"]))  # a real change is still named
    assert any(c.startswith("env.name: 'none' -> 'calculator'") for c in changed), changed
