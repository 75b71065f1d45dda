"""The scaling options (schema `scaling.*`), their validation, and the one mapping from options to fitter arguments.
Imported by rlx.config, so it imports no scipy, numpy or matplotlib."""


import dataclasses
from dataclasses import dataclass, field

COMPUTE_UNITS = ("gpu_hours", "flops", "tokens", "steps")  # perf/compute/<unit> in metrics.jsonl
FIT_KINDS = ("sigmoid", "power")  # scaling.fit, besides "none"


@dataclass
class ScalingConfig:
    """Compute->reward curve fits (ScaleRL) from a run's metrics.jsonl; x: `perf/compute/<compute>`."""

    fit: str = field(default="none", metadata={
        "help": "none | sigmoid | power: fit reward against compute at the end of a run"})
    compute: str = field(default="flops", metadata={"help": "gpu_hours | flops | tokens | steps"})
    metric: str = field(default="val/acc", metadata={"help": "the held-out reward on the y axis"})
    # early window left out of the fit: points below max(exclude_before, exclude_fraction * max compute)
    exclude_before: float = field(default=0.0, metadata={
        "help": "absolute compute threshold (ScaleRL: ~1.5k GPU-hours)"})
    exclude_fraction: float = field(default=0.0, metadata={"help": "fraction of the largest observed compute"})
    fit_fraction: float = field(default=1.0, metadata={
        "help": "fit on compute <= fit_fraction * max; later points are held out (ScaleRL: 0.5)"})
    target_compute: float = field(default=0.0, metadata={
        "help": "where to predict the reward; 0 => 4x the largest observed compute"})
    bootstrap: int = field(default=200, metadata={
        "help": "resamples of the evaluation points for intervals and the band (0 => none)"})
    confidence: float = field(default=0.95, metadata={"help": "level of the bootstrap intervals"})
    a_step: float = field(default=0.005, metadata={"help": "grid step of the asymptote A"})
    n_cmid: int = field(default=100, metadata={"help": "log-spaced grid values of C_mid"})
    min_points: int = field(default=4, metadata={
        "help": "evaluation points (compute > 0, after exclusion) needed for a fit"})
    margin: float = field(default=0.02, metadata={
        "help": "ScaleRL's comparison rule: recipes with |dA| <= margin are compared on B"})
    seed: int = field(default=0, metadata={"help": "bootstrap seed"})


def as_config(cfg) -> ScalingConfig:
    """A ScalingConfig from a ScalingConfig, an OmegaConf node or a dict (unknown keys are an error); validated."""
    if not isinstance(cfg, ScalingConfig):
        names = {f.name for f in dataclasses.fields(ScalingConfig)}
        given = dict(cfg.items()) if hasattr(cfg, "items") else {}
        unknown = set(given) - names
        if unknown:
            raise ValueError(f"unknown scaling option(s): {', '.join(sorted(unknown))}")
        cfg = ScalingConfig(**given)
    if cfg.fit != "none" and cfg.fit not in FIT_KINDS:
        raise ValueError(f"unknown scaling.fit {cfg.fit!r}; choose none or one of {', '.join(FIT_KINDS)}")
    if cfg.compute not in COMPUTE_UNITS:
        raise ValueError(f"unknown scaling.compute {cfg.compute!r}; choose one of {', '.join(COMPUTE_UNITS)}")
    if not 0.0 < cfg.fit_fraction <= 1.0:
        raise ValueError(f"scaling.fit_fraction must be in (0, 1], got {cfg.fit_fraction}")
    if cfg.target_compute < 0 or cfg.bootstrap < 0 or cfg.margin < 0:
        raise ValueError("scaling.target_compute, bootstrap and margin must be >= 0")
    return cfg


def fitter_options(cfg: ScalingConfig, kind: str) -> dict:
    """Keyword arguments of `fit_sigmoid` / `fit_power` taken from the config (every fit and refit uses these)."""
    out = dict(exclude_before=cfg.exclude_before, exclude_fraction=cfg.exclude_fraction, a_step=cfg.a_step,
               bootstrap=cfg.bootstrap, confidence=cfg.confidence, seed=cfg.seed, min_points=cfg.min_points)
    if kind == "sigmoid":
        out["n_cmid"] = cfg.n_cmid
    return out
