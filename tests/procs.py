"""The processes on this host as /proc shows them: whether one is alive, a process group's members, a process's
descendants. Tests that kill processes use these to check what they killed."""

from __future__ import annotations

from pathlib import Path


def _stat(pid: int | str) -> list[str] | None:
    """/proc/PID/stat's fields after "pid (comm)": state, ppid, pgrp, ...; None once the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Running (a killed grandchild may linger as a zombie where nothing reaps it: that is not alive)."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def _live() -> dict[int, list[str]]:
    stats = {int(d.name): _stat(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()}
    return {pid: f for pid, f in stats.items() if f is not None and f[0] not in ("Z", "X")}


def group(pgid: int) -> list[int]:
    """The live processes of process group `pgid`."""
    return [pid for pid, f in _live().items() if int(f[2]) == pgid]


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (torchrun starts each rank in a session of its own: a signal to the agent's
    process group never reaches the ranks)."""
    children: dict[int, list[int]] = {}
    for child, f in _live().items():
        children.setdefault(int(f[1]), []).append(child)
    found, todo = [], list(children.get(pid, []))
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found
