"""Entry point of `python -m rlx.report SWEEP_DIR` (see rlx.report.cli)."""

import sys

from rlx.report.cli import main

if __name__ == "__main__":
    sys.exit(main())
