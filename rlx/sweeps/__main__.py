"""Entry point of `python -m rlx.sweeps NAME [overrides...]` (see rlx.sweeps.cli)."""

import sys

from rlx.sweeps.cli import main

if __name__ == "__main__":
    sys.exit(main())
