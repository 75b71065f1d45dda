"""What `rlx-eval` evaluates and with which config, decided before any model is built: a run, a checkpoint, an
exported adapter or the base (docs/eval.md, "What it evaluates")."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

CONF = Path(__file__).resolve().parents[2] / "conf"
GROUPS = ("model", "task", "rollout", "algo", "quant", "noise", "extrapolation", "scaling", "logger", "experiment")


@dataclass
class Source:
    kind: str  # run | checkpoint | export | base
    path: Path | None = None  # what the command named
    run_dir: Path | None = None  # (an export: its own directory, where eval/step_N goes by default)
    checkpoint: Path | None = None  # ckpt/step_N or the exported directory to load (None: the base)
    step: int = 0  # the policy's training step (the evaluation stream's seed, as in training)
    config_file: Path | None = None  # the run's .hydra/config.yaml, when the config comes from it

    @property
    def label(self) -> str:
        return "base" if self.checkpoint is None else f"step_{self.step}"


def split_args(args: list[str]) -> tuple[str | None, list[str]]:
    """(the source path or None, the overrides): the source is an existing path or an argument without '='."""
    paths = [a for a in args if Path(a).exists() or ("=" not in a and not a.startswith(("+", "~")))]
    if len(paths) > 1:
        raise ValueError(f"rlx-eval takes one run directory or checkpoint, got {paths}")
    return (paths[0] if paths else None), [a for a in args if a not in paths]


def newest_intact(ckpt_root: Path) -> tuple[Path, int]:
    """The newest checkpoint under `ckpt_root` whose files match its manifest, and its step."""
    from rlx.run.checkpoint import Checkpointer, CorruptCheckpointError, verify

    ck = Checkpointer(ckpt_root)
    if not ck.steps():
        raise FileNotFoundError(f"no checkpoint in {ckpt_root} (a run saves ckpt/step_N every train.ckpt_every steps "
                                f"and at its end); to evaluate the base model instead, run rlx-eval without a path and "
                                f"with the run's overrides")
    problems = []
    for step in reversed(ck.steps()):
        try:
            return ck.root / f"step_{step}", int(verify(ck.root / f"step_{step}")["step"])
        except CorruptCheckpointError as e:
            problems.append(f"step_{step}: {e.file} {e.reason}")
    raise FileNotFoundError(f"no intact checkpoint in {ckpt_root}: {'; '.join(problems)}")


def resolve(path: str | None) -> Source:
    """The Source a command-line path names (None: the base); anything else, or a corrupt one, is refused."""
    from rlx.eval.export_format import CONFIG, is_export, verify_export
    from rlx.run.checkpoint import MANIFEST, STEP_DIR, CorruptCheckpointError, verify

    if path is None:
        return Source("base")
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"{p} does not exist (expected a run directory, RUN/ckpt/step_N or an exported "
                                f"adapter)")
    if is_export(p):
        info = verify_export(p)  # every file's sha256 (ExportError, a ValueError, names the bad one)
        return Source("export", Path(path), p, p, int(info["step"]), p / CONFIG)
    if p.name == "ckpt" and p.is_dir():
        p = p.parent
    if STEP_DIR.match(p.name) or (p / MANIFEST).is_file():
        try:
            step = int(verify(p)["step"])
        except CorruptCheckpointError as e:
            raise ValueError(f"{e}") from None
        run_dir = p.parent.parent
        cfg_file = run_dir / ".hydra" / "config.yaml"
        return Source("checkpoint", Path(path), run_dir, p, step, cfg_file if cfg_file.is_file() else None)
    cfg_file = p / ".hydra" / "config.yaml"
    if not cfg_file.is_file():
        raise FileNotFoundError(f"{cfg_file} is missing: {p} is not an rlx run directory (python -m rlx.train "
                                f"writes .hydra/config.yaml there) nor a checkpoint (RUN/ckpt/step_N with {MANIFEST})")
    ckpt, step = newest_intact(p / "ckpt")
    return Source("run", Path(path), p, ckpt, step, cfg_file)


def load_weights(src: Source, policy) -> None:
    """The source's trained weights (a checkpoint's, or an exported adapter) into `policy`, verified again."""
    if src.kind == "export":
        from rlx.eval.export_format import load_export

        load_export(src.checkpoint, policy)
        return
    from rlx.run.checkpoint import Checkpointer

    Checkpointer.load(src.checkpoint, policy)


def run_config(saved, overrides: list[str]) -> DictConfig:
    """A run's saved config (a file or a dict), typed by the schema, with `key=value` overrides on top."""
    for o in overrides:
        key = o.split("=", 1)[0]
        if o.startswith(("+", "~")) or "=" not in o:
            raise ValueError(f"rlx-eval on a run: override {o!r}: only key=value overrides of the run's own keys")
        if key in GROUPS:
            raise ValueError(f"rlx-eval on a run: {o!r} selects a config group, which would compose another config "
                             f"than the run's; override keys instead (e.g. {key}.<key>=...)")
    from hydra.core.config_store import ConfigStore

    import rlx.config  # noqa: F401  (registers the schema: typed as for Hydra, free dicts included)

    loaded = OmegaConf.load(saved) if isinstance(saved, (str, Path)) else OmegaConf.create(saved)
    try:
        schema = ConfigStore.instance().load("rlx_schema.yaml").node
        return OmegaConf.merge(schema, loaded, OmegaConf.from_dotlist(overrides))
    except Exception as e:  # omegaconf names the key and the value
        raise ValueError(f"config of the run with overrides {overrides}: {e}") from None


def base_config(overrides: list[str]) -> DictConfig:
    """conf/config.yaml composed with Hydra overrides, as `python -m rlx.train` would."""
    from hydra import compose, initialize_config_dir

    import rlx.config  # noqa: F401  (registers the schema)

    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose(config_name="config", overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as e:  # an unknown key or group option, a bad value: named
        raise ValueError(f"overrides {list(overrides)}: {e}") from None


def load_config(src: Source, overrides: list[str]) -> DictConfig:
    if src.kind == "base":
        return base_config(overrides)
    if src.config_file is not None:
        return run_config(src.config_file, overrides)
    from rlx.run.checkpoint import read_state

    saved = read_state(src.checkpoint).get("config")
    if not saved:
        raise ValueError(f"no config for {src.checkpoint}: neither {src.run_dir}/.hydra/config.yaml nor "
                         f"one stored in the checkpoint")
    return run_config(saved, overrides)
