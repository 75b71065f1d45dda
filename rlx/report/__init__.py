"""Paper-layout reports of a sweep: `rlx-report SWEEP_DIR` / `python -m rlx.report SWEEP_DIR` (docs/sweeps.md, "The
report"). `build` renders the `sections` that the sweep's `report:` block (`spec`) declares."""

from rlx.report.build import build_report, detect_layout  # noqa: F401
from rlx.report.cli import main  # noqa: F401
