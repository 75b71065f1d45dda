"""rlx.algo.config: the composed `algo` node converts to an AlgoConfig, which checks its own values (the
rules preflight used to hold included); the update and the shaping step bind it with their rollout values."""

from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf

from rlx.algo import AlgoConfig, CorrectionConfig, Shaping, Update, as_config
from tests.conftest import compose


def test_the_composed_node_converts_to_the_dataclass_with_its_values():
    cfg = compose(["algo=dapo", "algo.lr=0.02", "algo.correction.level=token", "algo.correction.cap=3"])
    a = as_config(cfg.algo)
    assert isinstance(a, AlgoConfig) and isinstance(a.correction, CorrectionConfig)
    node = OmegaConf.to_container(cfg.algo)
    assert {k: getattr(a, k) for k in node if k != "correction"} == {k: v for k, v in node.items() if k != "correction"}
    assert (a.name, a.lr, a.correction.level, a.correction.cap) == ("dapo", 0.02, "token", 3.0)
    assert as_config(a) is a  # already converted (and checked at construction)


@pytest.mark.parametrize("given,key", [({"lrr": 1e-3}, "algo.lrr"), ({"correction": {"cap2": 2.0}}, "algo.correction.cap2")])
def test_conversion_names_an_unknown_key(given, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        as_config(given)


# the four rules rlx.config.preflight held for the algo group, now AlgoConfig's own (NaN fails each: `not x >= 0`)
@pytest.mark.parametrize("field,value", [("weight_decay", -0.1), ("weight_decay", math.nan), ("grad_clip", 0.0),
                                         ("grad_clip", math.nan), ("warmup_steps", -1), ("lr", -1.0), ("lr", 2.0)])
def test_the_former_preflight_rules_are_the_configs_own(field, value):
    with pytest.raises(ValueError, match=rf"algo\.{field}"):
        AlgoConfig(**{field: value})


def test_a_bad_value_in_the_composed_config_fails_at_conversion():
    with pytest.raises(ValueError, match=r"algo\.loss 'reinforce'"):
        as_config(compose(["algo.loss=reinforce"]).algo)
    with pytest.raises(ValueError, match=r"algo\.correction\.hi"):
        as_config(compose(["algo.correction.level=token", "algo.correction.hi=0.5"]).algo)


def test_the_tis_cap_correction_record_is_not_checked_as_a_user_setting():
    """algo.tis_cap=0.5 (valid: any cap >= 0) becomes the update's own token-truncate record with cap 0.5,
    which algo.correction.cap (>= 1) would refuse: the record is built, not converted."""
    from rlx.algo.correction import resolve

    corr = resolve(AlgoConfig(tis_cap=0.5))
    assert (corr.level, corr.action, corr.cap) == ("token", "truncate", 0.5)


def test_update_and_shaping_bind_the_rollout_values_they_read():
    cfg = compose(["rollout.temperature=0.7", "rollout.max_new_tokens=5", "rollout.interrupt.mask_interrupted=true",
                   "rollout.group_size=3", "rollout.prompts_per_step=4", "algo.no_positive_resampling=true",
                   "algo.pass_rate_threshold=0.5"])
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    upd = Update.from_config(cfg, trainer=None, sched=sched)
    assert (upd.temperature, upd.max_new_tokens, upd.mask_interrupted, upd.sched) == (0.7, 5, True, sched)
    assert isinstance(upd.algo, AlgoConfig)
    shaping = Shaping.from_config(cfg)
    assert (shaping.group_size, shaping.prompts_per_step, shaping.max_new_tokens) == (3, 4, 5)
    assert shaping.curriculum is not None and shaping.curriculum.threshold == 0.5
    assert Shaping.from_config(compose([])).curriculum is None  # no_positive_resampling off: no curriculum


def test_the_configs_vocabulary_is_what_the_registries_hold():
    from rlx.algo import config
    from rlx.algo.advantages import ADV_NORMS
    from rlx.algo.aggregation import AGGREGATIONS
    from rlx.algo.losses import LOSSES

    assert (set(config.LOSSES), set(config.AGGREGATIONS), set(config.ADV_NORMS)) == (
        set(LOSSES), set(AGGREGATIONS), set(ADV_NORMS))
