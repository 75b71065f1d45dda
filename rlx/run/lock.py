"""One process per run directory: two `rlx.train` on one directory would interleave their metrics.jsonl rows,
overwrite each other's checkpoints and summary.json, and a resume would read whichever landed last.

That happens by accident: a sweep run in two lanes (two commands, each given half the arm files, both
reaching a job the other is still running), a sweep command rerun while it is still going, or `train.resume`
from a second shell. `hold(run_dir)` takes an exclusive, non-blocking `flock` on RUN/.rlx.lock for the life
of the process and refuses a second holder with the first one's pid, host and start time; it is taken
before anything is built or written, and the kernel drops it when the holder exits, however it exits (a
kill -9 leaves no stale lock). The file stays behind, empty of meaning once unlocked; deleting it would
race a process that has just opened it.
"""

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
    """The open lock file (keep it: closing it, or exiting, releases the lock); RunDirBusy if it is held."""
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
