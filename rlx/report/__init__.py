"""Paper-layout reports of a sweep: `rlx-report SWEEP_DIR` / `python -m rlx.report SWEEP_DIR`.

Reads every job directory under SWEEP_DIR (any depth; a job is a directory holding `.hydra/config.yaml`),
finds the report its sweep declares (the `report:` block of sweeps/<name>.yaml or conf/experiment/<name>.yaml:
rlx.report.spec) and writes SWEEP_DIR/report.md (also printed) with the declared sections in order, then the
curves (report_curves.png; report_scaling.png for ScaleRL sweeps), sample completions and a table of every job
with its status. A report of kind `runs` (one run directory per seed, no sweep file: the GSM8K runs) also writes
report.json. A new experiment declares its report; it needs no code here.

Modules: `spec` (the block, validated), `sections` (the kinds of section and the ways an arm is read), `build`,
the paper tables they call (`qerl`, `next`, `scalerl`, `pretrained`, `lr_choice`), `gsm8k` (the `runs` kind),
`tables` (shared cells), `sweeps` (papers.yaml, arms), `plots`, `cli`.
"""

from rlx.report.build import build_report, detect_layout  # noqa: F401
from rlx.report.cli import main  # noqa: F401
