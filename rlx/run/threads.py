"""torch's CPU threads sized to the free cores (`trainer.threads=-1`; docs/threads.md): an OpenMP team waits at
every op for a descheduled thread. Measured from /proc/stat less this process's own time, between RL steps."""

from __future__ import annotations

import os
import time

import torch

_CLK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _busy_s() -> float | None:
    """Seconds of CPU time all processes have used since boot (summed over cores), or None off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / _CLK  # user nice system idle iowait irq softirq steal


def _own_s() -> float:
    """CPU seconds of this process and of its live children (reward workers, a vLLM helper)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system + _live_children_s()


def _live_children_s() -> float:
    """CPU seconds of the children still running (os.times() counts only children that were waited for)."""
    total = 0.0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0.0
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                pids = f.read().split()
        except OSError:
            continue
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / _CLK  # utime stime (fields 14, 15)
            except (OSError, IndexError, ValueError):
                continue
    return total


def share() -> int:
    """The most threads this process may use: its cores over torchrun's local ranks, at most OMP_NUM_THREADS."""
    n = _cores() // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    omp = os.environ.get("OMP_NUM_THREADS", "")
    if omp.isdigit() and int(omp) > 0:
        n = min(n, int(omp))
    return max(1, n)


class ThreadGovernor:
    """Sets torch.set_num_threads to the cores the other processes left free over the last interval."""

    def __init__(self, cores: int | None = None, busy=_busy_s, own=_own_s, clock=time.monotonic,
                 limit: int | None = None):
        self.cores = cores or _cores()
        self.limit = limit or share()  # never more threads than this process's share
        self.threads = torch.get_num_threads()
        self._busy_s, self._own_s, self._clock = busy, own, clock  # the counters (tests pass their own)
        self._mark()

    def _mark(self) -> None:
        self._t, self._busy, self._own = self._clock(), self._busy_s(), self._own_s()

    def others(self) -> float | None:
        """Cores the other processes kept busy since the last mark (None off Linux or too soon)."""
        dt = self._clock() - self._t
        busy = self._busy_s()
        if busy is None or self._busy is None or dt < 0.05:
            return None
        return max(0.0, (busy - self._busy) - (self._own_s() - self._own)) / dt

    def tick(self) -> int:
        """Re-measure and set the thread count; returns it."""
        others = self.others()
        if others is not None:
            # a core counts as taken when another process kept it busy more than 60% of the interval
            free = self.cores - int(others + 0.4)
            want = max(1, min(self.limit, free))
            if want != self.threads:
                torch.set_num_threads(want)
                self.threads = want
        self._mark()
        return self.threads

    @classmethod
    def started(cls, sample_s: float = 0.3) -> "ThreadGovernor":
        """A governor whose first count comes from a short sample of the machine now."""
        g = cls()
        time.sleep(sample_s)
        g.tick()
        return g
