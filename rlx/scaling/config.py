from dataclasses import dataclass


@dataclass
class ScalingConfig:
    """Compute->reward curve fits (ScaleRL), from a run's metrics.jsonl alone.

    `fit`: none | sigmoid | power. `compute`: the x axis, read from `perf/compute/<compute>` next to
    each evaluation: gpu_hours | flops | tokens | steps.
    """

    fit: str = "none"  # none | sigmoid | power: fit reward against compute at the end of a run
    compute: str = "flops"  # gpu_hours | flops | tokens | steps
    metric: str = "val/acc"  # the held-out reward on the y axis
    # early window left out of the fit: points below max(exclude_before, exclude_fraction * max compute)
    exclude_before: float = 0.0  # absolute compute threshold (ScaleRL: ~1.5k GPU-hours)
    exclude_fraction: float = 0.0  # fraction of the largest observed compute
    fit_fraction: float = 1.0  # fit on compute <= fit_fraction * max; later points are held out (ScaleRL: 0.5)
    target_compute: float = 0.0  # where to predict the reward; 0 => 4x the largest observed compute
    bootstrap: int = 200  # resamples of the evaluation points for intervals and the band (0 => none)
    confidence: float = 0.95  # level of the bootstrap intervals
    a_step: float = 0.005  # grid step of the asymptote A
    n_cmid: int = 100  # log-spaced grid values of C_mid
    min_points: int = 4  # evaluation points (compute > 0, after exclusion) needed for a fit
    margin: float = 0.02  # ScaleRL's comparison rule: recipes with |dA| <= margin are compared on B
    seed: int = 0  # bootstrap seed
