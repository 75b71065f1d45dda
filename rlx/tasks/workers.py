"""Bounded worker processes: a small pool of spawn processes, each answering one message at a time, killed and
replaced past a deadline that counts from the moment a READY worker gets the message (docs/runs.md, "Rewards":
why processes, not threads, and what a hang costs).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import signal
import sys
import time
import traceback
import types
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import wait

READY, RAISED = "ready", "raised"  # the worker's start-up reply; a raised exception (with its traceback)
STARTUP_DEATHS = 3  # workers dead before READY, in a row, that mean the set-up itself is broken


class WorkerSetupError(RuntimeError):
    """A worker could not start: its set-up raised (traceback attached) or took longer than startup_s."""


def cap_memory(mem_mb: int) -> None:
    """Cap this (worker) process's address space: a blow-up ends in MemoryError, not swapping."""
    try:
        import resource

        limit = mem_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):  # platforms without RLIMIT_AS: time bound only
        pass


def serve(conn, mem_mb: int, setup, handle) -> None:
    """The worker side: cap memory, `state = setup()` (raised: RAISED), READY, `handle(state, msg)` until None."""
    cap_memory(mem_mb)
    try:
        state = setup()
    except BaseException:  # noqa: BLE001  (reported to the parent, which raises it)
        conn.send((RAISED, traceback.format_exc()))
        return
    conn.send((READY, None))
    while True:
        msg = conn.recv()
        if msg is None:
            return
        conn.send(handle(state, msg))


def exit_status(proc) -> str:
    """How a dead worker process ended, in words: 'exited with code 1', 'was killed by SIGSEGV (-11)'."""
    proc.join(timeout=5)  # its pipe closed: it is exiting
    code = proc.exitcode
    if code is None:
        return "closed its pipe but is still running"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name} ({code})"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


@dataclass
class _Proc:
    proc: object
    conn: object
    started: float  # time.monotonic() of the spawn
    ready: bool = False
    item: int | None = None  # index of the message it is answering
    deadline: float = 0.0


@dataclass
class _Batch:
    msgs: list
    results: list
    pending: deque = field(default_factory=deque)
    done: int = 0

    def finish(self, i: int, answer) -> None:
        self.results[i] = answer
        self.done += 1


@contextlib.contextmanager
def _main_not_reimported():
    """A spawn child re-imports its parent's __main__: a script without a main guard would run again in every
    worker. The child needs nothing of it (rewards there are refused), so while it starts __main__ is empty."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


@contextlib.contextmanager
def _stdlib_start_method():
    """A spawn child re-applies its parent's start method, and cannot find joblib's 'loky': name a stdlib one."""
    method = mp.get_start_method(allow_none=True)
    foreign = method is not None and method not in mp.get_all_start_methods()
    if foreign:
        mp.set_start_method("spawn", force=True)
    try:
        yield
    finally:
        if foreign:
            mp.set_start_method(method, force=True)


class WorkerPool:
    """`size + spares` spawn processes running `target(conn, mem_mb, arg)` (which calls `serve`), at most `size`
    answering at once; `map(msgs)`: an answer per message, None where the worker timed out or died (`stats`)."""

    def __init__(self, target, arg=None, *, size: int = 2, spares: int = 1, timeout_s: float = 5.0,
                 mem_mb: int = 4096, startup_s: float = 300.0, name: str = "rlx-worker"):
        if not timeout_s > 0:  # also refuses NaN
            raise ValueError(f"task.reward_timeout_s must be > 0, got {timeout_s}")
        if size < 1:
            raise ValueError(f"{name}: a pool needs at least one worker, got size={size}")
        self.target, self.arg, self.size, self.spares, self.name = target, arg, int(size), int(spares), name
        # startup_s: imports only, never a call's deadline (docs/runs.md: why 300 s)
        self.timeout_s, self.mem_mb, self.startup_s = float(timeout_s), int(mem_mb), float(startup_s)
        self.procs: list[_Proc] = []
        self.stats = {"timeouts": 0, "refused": 0, "errors": 0}
        self.startup_deaths = 0  # workers that died before READY since one last got ready

    # ---- processes ----------------------------------------------------------------------------
    def _spawn(self) -> _Proc:
        ctx = mp.get_context("spawn")  # never fork a process that holds torch threads
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=self.target, args=(child, self.mem_mb, self.arg), daemon=True, name=self.name)
        with _stdlib_start_method(), _main_not_reimported():
            proc.start()
        child.close()
        return _Proc(proc, parent, time.monotonic())

    @staticmethod
    def _stop(p: _Proc) -> None:
        p.proc.kill()  # a hard stop: the computation may be stuck inside C
        p.proc.join(timeout=5)
        p.conn.close()

    def _drop(self, p: _Proc) -> None:
        self.procs.remove(p)
        self._stop(p)

    def _replace(self, p: _Proc) -> None:
        """Kill `p` and start its replacement now, so it gets ready while the others work."""
        self._drop(p)
        self.procs.append(self._spawn())

    # ---- one batch ----------------------------------------------------------------------------
    def map(self, msgs: list) -> list:
        """The answer to each message (in order), None where it timed out or its worker died."""
        batch = _Batch(list(msgs), [None] * len(msgs), deque(range(len(msgs))))
        while len(self.procs) < self.size + self.spares:
            self.procs.append(self._spawn())
        try:
            while batch.done < len(batch.msgs):
                self._dispatch(batch)
                self._receive(batch)
                self._expire(batch)
        except BaseException:  # a set-up error, ^C: no worker is left mid-message
            for p in [p for p in self.procs if p.item is not None]:
                self._replace(p)
            raise
        return batch.results

    def ask(self, msg):
        return self.map([msg])[0]

    def _dispatch(self, batch: _Batch) -> None:
        for p in list(self.procs):
            busy = sum(q.item is not None for q in self.procs)
            if not (batch.pending and p.ready and p.item is None and busy < self.size):
                continue
            i = batch.pending.popleft()
            try:
                p.conn.send(batch.msgs[i])
            except OSError:  # died while idle (BrokenPipeError, ConnectionResetError): not this message's fault
                batch.pending.appendleft(i)
                self.stats["errors"] += 1
                self._replace(p)
                continue
            p.item, p.deadline = i, time.monotonic() + self.timeout_s

    def _receive(self, batch: _Batch) -> None:
        waiting = [p for p in self.procs if p.item is not None or not p.ready]
        if not waiting:
            return
        due = min(p.deadline if p.item is not None else p.started + self.startup_s for p in waiting)
        by_conn = {p.conn: p for p in waiting}
        for conn in wait(list(by_conn), timeout=max(0.0, due - time.monotonic())):
            p = by_conn[conn]
            try:
                kind, value = conn.recv()
            except (EOFError, OSError):  # died: the memory limit, or a crash at start-up
                self._died(p, batch)
                continue
            if not p.ready:
                if kind == RAISED:
                    self._drop(p)
                    raise WorkerSetupError(f"{self.name}: the worker's set-up raised:\n{value}")
                p.ready, self.startup_deaths = True, 0
                continue
            batch.finish(p.item, (kind, value))
            p.item = None

    def _died(self, p: _Proc, batch: _Batch) -> None:
        """Score its message 0 (None); STARTUP_DEATHS dead before READY in a row raise WorkerSetupError."""
        self.stats["errors"] += 1
        if p.item is not None:
            batch.finish(p.item, None)
        elif not p.ready:
            self.startup_deaths += 1
            if self.startup_deaths >= STARTUP_DEATHS:
                self.startup_deaths = 0  # a later call gets a fresh start
                cause = exit_status(p.proc)
                self._drop(p)
                raise WorkerSetupError(f"{self.name}: {STARTUP_DEATHS} workers in a row died while starting (in their "
                                       f"imports / set-up, before any was ready; the last {cause}); no reward can "
                                       f"be scored, fix the set-up")
        self._replace(p)

    def _expire(self, batch: _Batch) -> None:
        now = time.monotonic()
        for p in list(self.procs):
            if p.item is not None and now >= p.deadline:
                self.stats["timeouts"] += 1
                batch.finish(p.item, None)
                self._replace(p)
            elif not p.ready and now >= p.started + self.startup_s:
                self._drop(p)
                raise WorkerSetupError(f"{self.name}: a worker did not start within {self.startup_s:.0f}s "
                                       f"(its imports / set-up)")

    # ---- bookkeeping --------------------------------------------------------------------------
    def pop_stats(self) -> dict[str, int]:
        out, self.stats = self.stats, {"timeouts": 0, "refused": 0, "errors": 0}
        return out

    def close(self) -> None:
        for p in self.procs:
            try:
                if p.proc.is_alive() and p.item is None and p.ready:
                    p.conn.send(None)
                    p.proc.join(timeout=2)
            except OSError:
                pass
            self._stop(p)
        self.procs = []

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
