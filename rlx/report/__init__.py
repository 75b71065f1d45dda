"""Paper-layout reports of a sweep: `rlx-report SWEEP_DIR` / `python -m rlx.report SWEEP_DIR`.

Reads every job directory under SWEEP_DIR (any depth; a job is a directory holding
`.hydra/config.yaml`), finds each job's arm from `.hydra/overrides.yaml` (the sweep's arm group,
e.g. `qerl_arm=lora_nvfp4`, or the swept config keys) and its config, and writes:

- SWEEP_DIR/report.md (also printed): the paper-layout table(s), the paper's numbers alongside
  where they are comparable, and a table of every job with its status (failed jobs are marked);
- SWEEP_DIR/report_curves.png: train reward, policy entropy and held-out accuracy per arm
  (mean over seeds, min-max band);
- SWEEP_DIR/report_scaling.png (ScaleRL sweeps): pooled evaluations and fitted sigmoids per arm
  (fits by `rlx.scaling`).

The layout is chosen by the sweep's `logger.group` (set by every `sweeps/*.yaml`) or `--layout`.
`--layout smollm2_gsm8k` (`gsm8k`) reports run directories of the real-GSM8K experiment, one per seed, with no sweep
file: the three readings' paired per-problem intervals, the t-interval over seeds and ScaleRL's predictability, also
as SWEEP_DIR/report.json (`--base`: the step-0 per-problem file of runs that lack one).
Modules: `build` (layouts, the report), one module per paper's tables (`qerl`, `qerl_tuned`, `next`, `scalerl`, `gsm8k`),
`lr_choice` (a tuning sweep's training-side lr; its CLI is `select_lr`),
`tables` (shared cells), `sweeps` (layouts, arms through rlx.sweeps.spec, numbers from papers.yaml), `plots`,
`cli`. Jobs are read by rlx.run.records; ScaleRL fits and verdicts come from rlx.scaling.
"""

from rlx.report.build import LAYOUTS, build_report, detect_layout  # noqa: F401
from rlx.report.cli import main  # noqa: F401
