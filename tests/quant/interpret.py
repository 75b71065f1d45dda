"""Run a Triton check script in a child process under the interpreter (TRITON_INTERPRET=1): the mode is fixed
when a kernel is decorated, so a test process that imported the kernel compiled cannot switch it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_interpreted(script: str, marker: str, timeout: float = 300) -> None:
    """Fail with the child's stderr unless `script` exits 0 and prints `marker`."""
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0 and marker in proc.stdout, (proc.returncode, proc.stderr[-3000:])
