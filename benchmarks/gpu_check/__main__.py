"""Entry point of `python -m benchmarks.gpu_check` (see benchmarks.gpu_check)."""

import sys

from benchmarks.gpu_check import main

if __name__ == "__main__":
    sys.exit(main())
