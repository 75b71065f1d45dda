"""The root schema from each package's config, registered in Hydra's ConfigStore (a wrong key or type fails at
composition, named by OmegaConf), and the key listing `--help` prints (`python -m rlx.config`, rlx-config-keys)."""

from __future__ import annotations

import functools
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from rlx.algo.config import AlgoConfig
from rlx.envs.config import EnvConfig
from rlx.extrapolation.config import ExtrapolationConfig
from rlx.models.config import ModelConfig
from rlx.noise.config import NoiseConfig
from rlx.quant.config import QuantConfig
from rlx.rollout.config import RolloutConfig
from rlx.run.config import LoggerConfig, TrainConfig, TrainerConfig
from rlx.scaling.config import ScalingConfig
from rlx.tasks.config import TaskConfig


@dataclass
class RLXConfig:
    seed: int = field(default=0, metadata={
        "help": "run seed: LoRA init, sampling, data order (the SFT base has its own model.sft.seed)"})
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    quant: QuantConfig = field(default_factory=QuantConfig)
    noise: NoiseConfig = field(default_factory=NoiseConfig)
    extrapolation: ExtrapolationConfig = field(default_factory=ExtrapolationConfig)
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    paper: Any = field(default=None, metadata={"help": "free-form notes carried by paper-scale experiment files"})
    report: Any = field(default=None, metadata={
        "help": "the report a sweep or experiment file declares (rlx.report.spec); training ignores it"})


FREE_FORM = {"paper", "report"}  # top-level keys whose contents the schema does not describe


@functools.cache
def _root_schema():  # built once and read-only: preflight walks it at every check, each run and each test
    return OmegaConf.structured(RLXConfig, flags={"readonly": True})


def unknown_keys(cfg, schema=None, prefix: str = "") -> list[str]:
    """Keys in `cfg` the schema does not have (Hydra's `+key=value` bypasses it): stored and silently ignored."""
    schema = _root_schema() if schema is None else schema
    out = []
    for key in cfg.keys():
        if not prefix and key in FREE_FORM:
            continue
        full = f"{prefix}{key}"
        if key not in schema:
            out.append(full)
            continue
        child, sub = cfg._get_node(key), schema._get_node(key)
        if isinstance(child, DictConfig) and isinstance(sub, DictConfig) and is_dataclass(sub._metadata.object_type):
            out += unknown_keys(child, sub, full + ".")
    return out


def describe_keys(cls=None, prefix: str = "") -> list[tuple[str, object, str]]:
    """(key, default, the field's metadata["help"]) for every key of the schema (`python -m rlx.config`)."""
    cls = RLXConfig if cls is None else cls
    rows = []
    for f in fields(cls):
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        if is_dataclass(default):
            rows += describe_keys(type(default), f"{prefix}{f.name}.")
        else:
            rows.append((f"{prefix}{f.name}", default, f.metadata.get("help", "")))
    return rows


def keys_text() -> str:
    """Every config key, its default and what it means, one per line (`--help`, `python -m rlx.config`)."""
    return "\n".join(f"{key} = {default!r}" + (f"  # {text}" if text else "") for key, default, text in describe_keys())


def main() -> None:
    print(keys_text())


def _rank0_only(value, other=None):
    """`value` on rank 0 (and in a single process), `other` on the other ranks of a torchrun/SLURM job."""
    from rlx.run.distributed import env_rank

    return value if env_rank() == 0 else other


def register_configs() -> None:
    node = OmegaConf.structured(RLXConfig)
    # reward weights are a free dict: `task.rewards={correct: 1.0, format: 0.5}` may add names on the
    # command line (Hydra makes the whole config struct, which would refuse any new key there); the node
    # itself, not the interpolation's target
    OmegaConf.set_struct(node.task._get_node("rewards"), False)
    OmegaConf.set_struct(node.task.default_rewards, False)
    OmegaConf.set_struct(node.task.eval, False)  # eval set names too (each set's keys stay typed)
    cs = ConfigStore.instance()
    cs.store(name="rlx_schema", node=node)
    if not OmegaConf.has_resolver("rlx_keys"):  # `--help` lists every key; Hydra's help template is a string.Template
        OmegaConf.register_new_resolver("rlx_keys", lambda: keys_text().replace("$", "$$"))
    if not OmegaConf.has_resolver("rlx_rank0"):  # under torchrun, Hydra's own files come from rank 0 alone
        OmegaConf.register_new_resolver("rlx_rank0", _rank0_only)


register_configs()
