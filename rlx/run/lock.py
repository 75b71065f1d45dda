"""One process per run directory (docs/runs.md): an exclusive non-blocking `flock` on RUN/.rlx.lock, which the
kernel drops however the holder exits; the file stays (deleting it would race a process opening it)."""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path

LOCK = ".rlx.lock"


class RunDirBusy(ValueError):
    """Another live process holds the run directory."""


def hold(run_dir: Path):
    """The open lock file (closing it, or exiting, releases the lock); RunDirBusy if it is held."""
    path = Path(run_dir) / LOCK
    f = open(path, "a+")
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "a process that has not yet written its pid"
        f.close()
        raise RunDirBusy(f"{run_dir} is in use by another rlx.train ({holder}): two runs in one directory would "
                         f"overwrite each other's metrics.jsonl, checkpoints and summary.json. Wait for it to "
                         f"finish (this command then resumes or skips the run), or give this run another "
                         f"hydra.run.dir") from None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    f.flush()
    return f
