"""Entry point of `python -m rlx.bench.gpu` (see rlx.bench.gpu)."""

import sys

from rlx.bench.gpu import main

if __name__ == "__main__":
    sys.exit(main())
