"""Paper-layout reports of a sweep: `rlx-report SWEEP_DIR` / `python -m rlx.report SWEEP_DIR` (docs/sweeps.md,
"The report"). `spec` reads the sweep's `report:` block, `build` renders its `sections` in order (the paper tables
of `qerl`, `next`, `scalerl`, `pretrained`, `lr_choice`; `runs` for one run per seed), `tables` holds shared cells.
"""

from rlx.report.build import build_report, detect_layout  # noqa: F401
from rlx.report.cli import main  # noqa: F401
