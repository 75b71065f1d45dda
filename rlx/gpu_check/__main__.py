"""Entry point of `python -m rlx.gpu_check` (see rlx.gpu_check)."""

import sys

from rlx.gpu_check import main

if __name__ == "__main__":
    sys.exit(main())
