"""QeRL on SmolLM2 with each arm's own learning rate (sweeps/smollm2_qerl_tuned.yaml): the training-side lr choice
(rlx.report.select_lr), QeRL's tables at each arm's chosen lr, the verdict on each of the paper's claims, and
why the arms differ (zero-variance groups, truncation, trainer-vs-engine mismatch).

A job's arm is read from its config (quantization format and noise: rlx.report.qerl.infer_qerl), not from its
arm file, so the runs of one arm at several lrs (stage 1) are one arm here, split by algo.lr.
"""

from __future__ import annotations

from rlx.report.pretrained import pretrained_tables
from rlx.report.qerl import PAIRS, infer_qerl, qerl_tables
from rlx.report.lr_choice import expected_grid, lr_of, select, selection_table
from rlx.report.sweeps import Layout, papers
from rlx.report.tables import (acc_points, beyond_points, first_tenth_mean, md_table, mean_metric, paired_by_seed,
                               paired_cell, seed_verdict, stat)
from rlx.run.records import Run
from rlx.sweeps.spec import arm_axis

SWEEP = "smollm2_qerl_tuned"
ARMS = ("lora_none", "lora_nvfp4", "lora_nvfp4_aqn", "lora_nf4")
TUNED_PAIRS = PAIRS + (("lora_nvfp4", "lora_nf4"),)


class TunedLayout(Layout):
    """The arms are QeRL's four, from each job's config; the arm file (arm and lr) stays in the job's overrides."""

    @property
    def order(self) -> list[str]:
        return list(ARMS)

    def arm_of(self, job: Run) -> str:
        return infer_qerl(job)

    def shown(self, arms: dict[str, list[Run]]) -> dict[str, list[Run]]:
        """The curves and completions show what the tables count: each arm's runs at its chosen lr."""
        return at_chosen_lr(arms)[0]


def stages(jobs: list[Run]) -> tuple[list[Run], list[Run]]:
    """(stage 1: seed 0, the lr sweep; stage 2: every other seed, fresh runs at the chosen lrs)."""
    return [j for j in jobs if j.seed == 0], [j for j in jobs if j.seed != 0]


def at_chosen_lr(arms: dict[str, list[Run]]) -> tuple[dict[str, list[Run]], dict]:
    """({arm: the runs its tables count}, the choices). The choice is stage 1's (seed 0 over the sweep file's
    whole grid), or, in a stage-2 directory alone, the one lr each arm ran at. An arm's tables count its
    stage-2 runs at the chosen lr when it has any (seed 0 was selected for its training reward, so it is
    never one of them), else its stage-1 run at the chosen lr; an arm still undecided is left out."""
    jobs = [j for js in arms.values() for j in js]
    first, second = stages(jobs)
    if first:
        choices = select(first, lambda j: j.arm, arm_key=arm_axis(SWEEP)[0], expected=expected_grid(SWEEP))
    else:
        choices = select(second, lambda j: j.arm, arm_key=arm_axis(SWEEP)[0])
    kept = {}
    for arm, js in arms.items():
        later = [j for j in js if j.seed != 0]
        lrs = {lr_of(j) for j in later}
        if later and not first and len(lrs) == 1:
            kept[arm] = later  # stage 2 alone: its one lr, finished or not
        elif arm in choices and choices[arm].decided:
            pool = later or [j for j in js if j.seed == 0]
            kept[arm] = [j for j in pool if lr_of(j) == choices[arm].lr]
    return {a: js for a, js in kept.items() if js}, choices


CLAIMS = (  # (claim, arm, against, value, format)
    ("NVFP4 LoRA >= 16-bit LoRA (final accuracy)", "lora_nvfp4", "lora_none", acc_points, "{:+.1f}"),
    ("AQN raises policy entropy (mean over RL steps)", "lora_nvfp4_aqn", "lora_nvfp4", mean_metric("actor/entropy"),
     "{:+.4f}"),
    ("AQN raises accuracy (final)", "lora_nvfp4_aqn", "lora_nvfp4", acc_points, "{:+.1f}"),
    ("NVFP4 LoRA beats QLoRA (final accuracy)", "lora_nvfp4", "lora_nf4", acc_points, "{:+.1f}"),
)


def claims_table(arms: dict[str, list[Run]], labels: dict[str, str]) -> list[str]:
    rows = []
    for claim, a, b, value, fmt in CLAIMS:
        diffs = paired_by_seed(arms, a, b, value)
        row = [claim, f"{labels.get(a, a)} - {labels.get(b, b)}", paired_cell(diffs, fmt), seed_verdict(diffs)]
        if value is acc_points:  # the same claim once the best constant guess is out (rlx.eval.guess)
            guessless = paired_by_seed(arms, a, b, beyond_points)
            row += [paired_cell(guessless, fmt), seed_verdict(guessless)] if guessless else ["–", "–"]
        else:
            row += ["", ""]
        rows.append(row)
    return ["", "### The paper's claims, seed by seed", "",
            "Paired over the seeds both arms finished, each arm at its own lr: mean difference [95% t-interval] "
            "(n seeds); holds needs the interval above 0, for the '>=' claim too (no non-inferiority margin is "
            "assumed). Accuracy in points; the last two columns read accuracy on the held-out problems whose gold "
            "is not the set's most common gold, so a policy that gives one answer everywhere gains nothing there "
            "(rlx.eval.guess, docs/eval.md 'One answer everywhere').", ""] + md_table(
        ["claim", "difference", "paired difference", "verdict", "without the most common gold", "verdict"], rows)


WHY = (  # (column, metric, reducer, scale)
    ("zero-variance groups %", "train/frac_reward_zero_std", None, 100),
    ("zero-variance groups %, first 10% of steps", "train/frac_reward_zero_std", first_tenth_mean, 100),
    ("truncated completions %", "response_length/clip_ratio", None, 100),
    ("truncated %, first 10% of steps", "response_length/clip_ratio", first_tenth_mean, 100),
    ("trainer-engine KL (rollout_corr/kl)", "rollout_corr/kl", None, 1),
    ("trainer-engine |logp diff| (rollout/logprob_diff/mean)", "rollout/logprob_diff/mean", None, 1),
)


def why_table(arms: dict[str, list[Run]], labels: dict[str, str]) -> list[str]:
    """Per arm: how many groups gave no gradient, how many completions hit the length cap, and how far the
    engine's log-probs were from the trainer's (mean over RL steps, then mean ± std over seeds)."""
    rows = []
    for arm, js in arms.items():
        cells = []
        for _, metric, reducer, scale in WHY:
            fn = mean_metric(metric) if reducer is None else mean_metric(metric, reducer=reducer)
            s = stat(js, fn)
            cells.append(s.cell(scale, 1 if scale == 100 else 6))
        rows.append([labels.get(arm, arm)] + cells)
    return ["", "### Why the arms differ", "",
            "Per run, the mean over RL steps (or over its first 10% of steps), then mean ± std over seeds. A "
            "zero-variance group (every sample rewarded alike) gives no gradient; a truncated completion hit "
            "rollout.max_new_tokens; the trainer-engine mismatch compares the engine's behaviour log-probs with "
            "the trainer's (AQN's noise lives in the engine's weights only).", ""] + md_table(
        ["arm"] + [c for c, *_ in WHY], rows)


def tuned_tables(arms: dict[str, list[Run]], jobs: list[Run]) -> list[str]:
    labels = papers()["qerl"]["labels"]
    chosen, choices = at_chosen_lr(arms)
    first, second = stages(jobs)
    out = ["## Learning rate per arm (training side)", ""]
    if not first:  # stage 2 alone: the lrs were chosen by stage 1's sweep
        out += ["Each arm ran at one lr (chosen on stage 1's training reward: `python -m rlx.report.select_lr "
                "<stage 1 directory>`): " + ", ".join(f"{labels.get(a, a)} {c.lrs[0].lr:g}"
                                                      for a, c in choices.items()) + ".", ""]
    else:
        out += selection_table(choices, labels) + [""]
    if not chosen:
        return out + ["No arm is decided yet: the tables below need each arm's runs at its chosen lr."]
    jobs_at = [j for js in chosen.values() for j in js]
    which = ("stage-2 seeds at its chosen lr (stage 1's seed 0 chose the lr and is not counted; an arm with no "
             "stage-2 run yet shows its stage-1 run there, one seed)" if second
             else "stage-1 run (seed 0) at its chosen lr: a preview, one seed, selected for its training reward")
    out += [f"The tables below count each arm's {which} ({len(jobs_at)} of {len(jobs)} runs). Each arm is at "
            f"its own lr, so an arm-vs-arm difference includes the lr's effect, as the paper's per-arm settings do.",
            ""]
    out += qerl_tables(chosen, jobs_at, sweep=SWEEP, row="rlx SmolLM2-135M (each arm at its lr)",
                       sixteen_bit="the unquantized base (fp32)", order=list(ARMS), pairs=TUNED_PAIRS)
    out += claims_table(chosen, labels) + why_table(chosen, labels)
    return out + [""] + pretrained_tables(chosen, jobs_at, heading="arm: ")


LAYOUT = TunedLayout(SWEEP, "QeRL on SmolLM2-135M, each arm at its own lr (word problems, fp32, vLLM)", infer_qerl,
                     tuned_tables, papers()["qerl"]["labels"])
