"""ScaleRL's tables (losses, leave-one-out, off-policy families): sigmoid fits per arm (rlx.scaling, seeds pooled)
and ScaleRL's rule against a reference arm."""

from __future__ import annotations

from rlx.report.sweeps import papers
from rlx.report.tables import md_table, stat, summary_value
from rlx.run.records import Run
from rlx.scaling.compare import Row, compare_rows, fit_group
from rlx.scaling.config import ScalingConfig
from rlx.sweeps.points import scaling_config
from rlx.sweeps.spec import arm_settings


def fit_arms(arms: dict[str, list[Run]], cfg: ScalingConfig) -> dict[str, Row]:
    """Per arm: the finished seeds pooled and fitted (rlx.scaling.compare.fit_group)."""
    out = {}
    for arm, js in arms.items():
        done = [j for j in js if j.ok]
        out[arm] = fit_group(arm, done, cfg, "sigmoid")
        if not done:
            out[arm].note = "no finished run"
    return out


def _fit_cells(f: Row) -> list[str]:
    if f.fit is None:
        return ["–", "–", "–"]
    p, iv = f.fit.params, f.fit.intervals
    a = f"{p['A']:.3f}" + (f" ± {(iv['A'][1] - iv['A'][0]) / 2:.3f}" if "A" in iv else "")
    b = f"{p['B']:.2f}" + (f" [{iv['B'][0]:.2f}, {iv['B'][1]:.2f}]" if "B" in iv else "")
    return [a, b, f"{p['C_mid']:.3g}" if "C_mid" in p else "–"]


def verdict_cell(first: Row, second: Row, cfg: ScalingConfig) -> str:
    """ScaleRL's rule between two arms: the winner and why, `tie`, or `undetermined`."""
    if first.fit is None or second.fit is None or first.fit.kind != "sigmoid" or second.fit.kind != "sigmoid":
        return "–"
    try:
        v = compare_rows(first, second, cfg)
    except ValueError as err:
        return f"no verdict: {err}"
    if v.rule == "undetermined":
        return f"undetermined ({v.edge_note()})"
    how = ("higher A" if v.rule == "asymptote"
           else f"B at common A={v.A_common:.3f}: {v.first} {v.B_first:.2f} vs {v.second} {v.B_second:.2f}")
    sure = "" if v.separable else " (intervals overlap)"
    return f"{v.winner or 'tie'} ({how}){sure}"


def infer_algo(j: Run) -> str:
    return str(j.get("algo.name", "?"))


def losses_tables(arms: dict[str, list[Run]], jobs: list[Run]) -> list[str]:
    t1 = papers()["scalerl"]["table1"]["ScaleRL"]
    paper = {"scalerl": f"A {t1['A']}, B {t1['B']}, C_mid {t1['C_mid']:g} GPU-h", **papers()["scalerl"]["losses"]}
    return vs_reference(arms, jobs, "scalerl", {}, paper, "## ScaleRL: loss / recipe comparison with sigmoid fits",
                        "algo", rule_column="vs scalerl (ScaleRL's rule)")


def infer_loo(j: Run) -> str:
    """The components the job reverts: every sweeps/loo_arm/ arm whose settings the job's config carries."""
    reverted = [arm for arm, keys in arm_settings("loo_arm").items()
                if keys and all(j.flat.get(k) == v for k, v in keys.items())]
    return "+".join(reverted) or "scalerl"


def vs_reference(arms: dict[str, list[Run]], jobs: list[Run], ref_arm: str, labels: dict[str, str],
                 paper: dict[str, str], title: str, first_col: str, rule_column: str | None = None) -> list[str]:
    """Sigmoid fit per arm and ScaleRL's rule of every arm against `ref_arm` (and dA, unless `rule_column`)."""
    cfg = scaling_config(jobs)
    fits = fit_arms(arms, cfg)
    ref = fits.get(ref_arm)
    rows = []
    for arm, js in arms.items():
        f = fits[arm]
        dA = (f"{f.fit.A - ref.fit.A:+.3f}" if ref is not None and ref.fit is not None and f.fit is not None
              and arm != ref_arm else "–")
        verdict = verdict_cell(ref, f, cfg) if ref is not None and arm != ref_arm else "–"
        rows.append([labels.get(arm, arm), f"{sum(j.ok for j in js)}/{len(js)}",
                     stat(js, summary_value(cfg.metric)).cell(100), *_fit_cells(f), *([] if rule_column else [dA]),
                     verdict, paper.get(arm, "–"), f.note])
    rule = [rule_column] if rule_column else [f"dA vs {labels.get(ref_arm, ref_arm)}", "ScaleRL's rule vs it"]
    intro = (f"Sigmoid R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) fitted by rlx.scaling to {cfg.metric} against "
             f"cumulative compute ({cfg.compute}), seeds pooled per arm, R0 fixed at the mean step-0 evaluation. "
             f"A: fit ± half its {int(round(100 * cfg.confidence))}% bootstrap interval. C_mid is in {cfg.compute} "
             f"(the paper's is GPU-hours, so only A and B compare). ScaleRL's rule: |dA| > {cfg.margin:g} -> the "
             f"higher A wins, else refit at a common A and the higher B wins.")
    return [title, "", intro, ""] + md_table(
        [first_col, "finished", f"final {cfg.metric} (%)", "A", "B", "C_mid", *rule, "paper", "note"], rows)


def loo_tables(arms: dict[str, list[Run]], jobs: list[Run]) -> list[str]:
    s = papers()["scalerl"]
    return vs_reference(arms, jobs, "scalerl", s["loo_labels"], s["loo"],
                        "## ScaleRL leave-one-out: each component reverted in turn", "recipe")


def infer_offpolicy(j: Run) -> str:
    r, a = j.config.get("rollout") or {}, j.config.get("algo") or {}
    if r.get("mode") != "sync" and r.get("max_staleness", 0) > 0:
        return f"pipeline_{r['max_staleness']}"
    return f"ppo_{a['mu']}" if a.get("mu", 1) > 1 else "on_policy"


def offpolicy_tables(arms: dict[str, list[Run]], jobs: list[Run]) -> list[str]:
    s = papers()["scalerl"]
    return vs_reference(arms, jobs, "pipeline_8", s["offpolicy_labels"], s["offpolicy"],
                        "## ScaleRL off-policy families: PipelineRL-k vs PPO-k", "off-policy family")
