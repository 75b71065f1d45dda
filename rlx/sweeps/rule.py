"""The predictive rule: after each round, which arms of a sweep run on (docs/predictive.md, "The rule": determined,
flat and undetermined fits, the leader, when an arm stops). Pure: points in, decisions out (driver: rounds)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from scipy.special import fdtrc

from rlx.scaling.fitting import fit_points


@dataclass
class ArmFit:
    """One arm's fit after a round: status determined | undetermined | flat, the fit (if any), and why."""

    status: str
    fit: object | None = None  # rlx.scaling.curves.SigmoidFit
    note: str = ""

    @property
    def A(self) -> float | None:
        return None if self.fit is None else float(self.fit.A)

    @property
    def A_interval(self) -> tuple[float, float] | None:
        return None if self.fit is None else self.fit.intervals.get("A")


@dataclass
class Decision:
    """One arm's decision after one round (a line of predictive.jsonl)."""

    round: int
    arm: str
    budget: int  # train.steps the arm has run to
    decision: str  # continue | stop
    reason: str
    fit: str  # determined | undetermined | flat
    A: float | None = None
    A_lo: float | None = None
    A_hi: float | None = None
    B: float | None = None
    C_mid: float | None = None
    R0: float | None = None
    leader: str | None = None
    flat_rounds: int = 0  # consecutive rounds flat, this one included

    def line(self) -> str:
        a = "-" if self.A is None else f"{self.A:.3f}"
        iv = "" if self.A_lo is None else f" [{self.A_lo:.3f}, {self.A_hi:.3f}]"
        return f"round {self.round} {self.arm}: steps {self.budget}, A {a}{iv} ({self.fit}) -> {self.decision}: {self.reason}"


def fit_arm(compute, reward, r0, cfg, max_width: float = 0.5, **fit_overrides) -> ArmFit:
    """Fit one arm's pooled points (compute [N], reward [N], R0) with the config's sigmoid options; classify it."""
    if len(compute) == 0:
        return ArmFit("undetermined", note="no evaluation after step 0")
    try:
        fit = fit_points(compute, reward, cfg, kind="sigmoid", r0=r0, **fit_overrides)
    except ValueError as err:
        return ArmFit("flat" if str(err).startswith("flat curve") else "undetermined", note=f"no fit: {err}")
    status, note = classify(fit, max_width)
    return ArmFit(status, fit, note)


def classify(fit, max_width: float = 0.5) -> tuple[str, str]:
    """(determined | undetermined, why) of a successful sigmoid fit."""
    lo_edge, hi_edge = fit.a_bounds
    iv = fit.intervals.get("A")
    if fit.A_at_edge:
        return "undetermined", f"A {fit.A:.3f} at the edge of its grid"
    if iv is None:
        return "undetermined", "no bootstrap interval of A (scaling.bootstrap=0)"
    if iv[0] <= lo_edge + 1e-9 or iv[1] >= hi_edge - 1e-9:
        return "undetermined", f"A's interval [{iv[0]:.3f}, {iv[1]:.3f}] reaches the edge of its grid"
    if iv[1] - iv[0] > max_width:
        return "undetermined", f"A's interval [{iv[0]:.3f}, {iv[1]:.3f}] wider than {max_width:g}"
    return "determined", ""


def decide(round_: int, fits: dict[str, ArmFit], budgets: dict[str, int], margin: float = 0.02,
           flat_before: dict[str, int] | None = None, flat_rounds: int = 3,
           reach_p: Callable[[str, float], float] | None = None, reach_alpha: float = 0.001) -> list[Decision]:
    """The decision for every arm still running after round `round_`. flat_before: {arm: consecutive flat rounds};
    reach_p(arm, A): `reach_test`'s p-value, below reach_alpha to stop an arm (None: the intervals alone decide)."""
    flat_before = flat_before or {}
    determined = {a: f for a, f in fits.items() if f.status == "determined"}
    leader = max(determined, key=lambda a: (determined[a].A, a)) if determined else None
    lead_lo = determined[leader].A_interval[0] if leader else None
    out = []
    for arm, f in fits.items():
        flats = flat_before.get(arm, 0) + 1 if f.status == "flat" else 0
        iv = f.A_interval
        d = Decision(round_, arm, int(budgets[arm]), "continue", "", f.status, f.A,
                     None if iv is None else float(iv[0]), None if iv is None else float(iv[1]),
                     None if f.fit is None else float(f.fit.B), None if f.fit is None else float(f.fit.C_mid),
                     None if f.fit is None else float(f.fit.R0), leader, flats)
        if f.status == "flat":
            if flats >= flat_rounds:
                d.decision, d.reason = "stop", f"flat for {flats} consecutive rounds ({f.note.removeprefix('no fit: ')})"
            else:
                d.reason = f"flat ({flats} of {flat_rounds} rounds before it stops)"
        elif f.status == "undetermined":
            d.reason = f"undetermined ({f.note}): never stops an arm"
        elif arm == leader:
            d.reason = "leader (highest A among determined fits)"
        elif iv[1] + margin < lead_lo - 1e-12:
            p = reach_p(arm, lead_lo - margin) if reach_p is not None else 0.0
            if p < reach_alpha:
                d.decision = "stop"
                d.reason = f"A_hi {iv[1]:.3f} + margin {margin:g} < leader {leader}'s A_lo {lead_lo:.3f}" + (
                    f"; a refit with A = {lead_lo - margin:.3f} is rejected (F-test p = {p:.2g})" if reach_p else "")
            else:
                d.reason = (f"A_hi {iv[1]:.3f} + margin {margin:g} < leader {leader}'s A_lo {lead_lo:.3f}, but a refit "
                            f"with A = {lead_lo - margin:.3f} fits about as well (F-test p = {p:.2g}): can still win")
        else:
            d.reason = f"can still win: A_hi {iv[1]:.3f} + margin {margin:g} >= leader {leader}'s A_lo {lead_lo:.3f}"
        out.append(d)
    if out and all(d.decision == "stop" for d in out):  # only flat arms left: keep them all, nothing to rank
        for d in out:
            d.decision, d.reason = "continue", f"{d.reason}; kept: a round never stops every arm"
    return out


def decide_points(round_: int, points: dict[str, tuple], budgets: dict[str, int], cfg,
                  flat_before: dict[str, int] | None = None, flat_rounds: int = 3, max_width: float = 0.5,
                  reach_alpha: float = 0.001, **fit_overrides) -> list[Decision]:
    """Fit every arm's pooled points {arm: (compute [N], reward [N], R0)} and `decide`."""
    fits = {arm: fit_arm(c, y, r0, cfg, max_width, **fit_overrides) for arm, (c, y, r0) in points.items()}
    reach = lambda arm, a: reach_test(*points[arm], fits[arm].fit, a, cfg, **fit_overrides)  # noqa: E731
    return decide(round_, fits, budgets, cfg.margin, flat_before, flat_rounds, reach, reach_alpha)


def reach_test(compute, reward, r0, fit, A: float, cfg, **fit_overrides) -> float:
    """p-value of the F-test of the arm's free fit against a refit with its asymptote held at A: small p means the
    data reject A (why: docs/predictive.md, "The rule"). 1.0 when the refit fails (never a reason to stop)."""
    try:
        held = fit_points(compute, reward, cfg, kind="sigmoid", r0=r0, **{**fit_overrides, "A": A, "bootstrap": 0,
                                                                          "flat_alpha": 0.0})
    except ValueError:
        return 1.0
    dof = fit.n_points - 3
    if dof <= 0 or fit.sse <= 0:
        return 0.0 if held.sse > fit.sse else 1.0
    f = max(held.sse - fit.sse, 0.0) / (fit.sse / dof)
    return float(fdtrc(1, dof, f)) if f > 0 else 1.0
