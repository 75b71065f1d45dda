"""math-verify under a hard bound: a worker process with a per-call deadline and a memory limit.

math-verify's own timeouts are signal alarms (main thread only), and even those cannot stop a
computation inside C (`9^9^9^9` is a big-integer power that never returns to the interpreter).
So every equivalence check runs in a separate worker process: the parent waits at most
`timeout_s` for each answer; past it the worker is killed (and restarted on the next call), the
completion scores 0 and the timeout is counted. The worker's address space is capped
(`mem_mb`), so a blow-up ends in MemoryError (scored 0, counted) instead of swapping the machine.
Inputs are bounded before they reach math-verify: completions longer than `MAX_CHARS` or with
braces nested deeper than `MAX_DEPTH` score 0 (a `\\frac` nested 150 deep otherwise verifies as
equal to `\\frac{1}{2}`: a reward a policy could learn to exploit).
"""

from __future__ import annotations

import multiprocessing as mp

MAX_CHARS = 20_000  # longer completions are not parsed (scored 0)
MAX_DEPTH = 24  # deeper brace nesting is not parsed (scored 0)


def brace_depth(text: str) -> int:
    depth = best = 0
    for ch in text:
        if ch == "{":
            depth += 1
            best = max(best, depth)
        elif ch == "}":
            depth = max(0, depth - 1)
    return best


def too_complex(text: str) -> bool:
    return len(text) > MAX_CHARS or brace_depth(text) > MAX_DEPTH


def cap_memory(mem_mb: int) -> None:
    """Cap this (worker) process's address space: a blow-up ends in MemoryError, not swapping."""
    try:
        import resource

        limit = mem_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):  # platforms without RLIMIT_AS: time bound only
        pass


def _worker(conn, mem_mb: int) -> None:  # runs in the child process
    cap_memory(mem_mb)
    from math_verify import parse, verify

    while True:
        msg = conn.recv()
        if msg is None:
            return
        gold_text, pred_text = msg
        try:
            gold = parse(gold_text, parsing_timeout=None)
            pred = parse(pred_text, parsing_timeout=None)
            ok = bool(gold) and bool(pred) and bool(verify(gold, pred, timeout_seconds=None))
            conn.send(("ok", float(ok)))
        except (MemoryError, RecursionError, OverflowError, ValueError) as e:
            conn.send(("bounded", type(e).__name__))


class BoundedWorker:
    """A spawn worker process (`target(conn, mem_mb)`) that answers one message at a time; each
    answer is awaited at most `timeout_s` (the first also gets `startup_s` for the worker's imports).
    Past the deadline the worker is killed (restarted on the next call) and the call returns None."""

    def __init__(self, target, timeout_s: float = 5.0, mem_mb: int = 4096, name: str = "rlx-worker",
                 startup_s: float = 60.0):
        if timeout_s <= 0:
            raise ValueError(f"task.reward_timeout_s must be > 0, got {timeout_s}")
        self.target, self.name, self.startup_s = target, name, float(startup_s)
        self.timeout_s, self.mem_mb = float(timeout_s), int(mem_mb)
        self._proc = None
        self._conn = None
        self._warm = False  # the worker has answered once (its imports are done)
        self.stats = {"timeouts": 0, "refused": 0, "errors": 0}

    def _start(self) -> None:
        ctx = mp.get_context("spawn")  # never fork a process that holds torch threads
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=self.target, args=(child, self.mem_mb), daemon=True, name=self.name)
        self._proc.start()
        child.close()
        self._conn = parent

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(timeout=5)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    @property
    def warm(self) -> bool:
        """The worker is running and has answered once since it started (its imports are done)."""
        return self._warm and self._proc is not None and self._proc.is_alive()

    def ask(self, msg) -> tuple | None:
        """The worker's answer to `msg`, or None after a timeout or a dead worker (counted in stats)."""
        if self._proc is None or not self._proc.is_alive():
            self._kill()
            self._start()
        self._conn.send(msg)
        wait = self.timeout_s + (0.0 if self._warm else self.startup_s)
        if not self._conn.poll(wait):
            self._kill()  # a hard stop: the computation may be stuck inside C
            self._warm = False
            self.stats["timeouts"] += 1
            return None
        try:
            answer = self._conn.recv()
        except EOFError:  # the worker died (e.g. killed by the memory limit)
            self._kill()
            self._warm = False
            self.stats["errors"] += 1
            return None
        self._warm = True
        return answer

    def pop_stats(self) -> dict[str, int]:
        out, self.stats = self.stats, {"timeouts": 0, "refused": 0, "errors": 0}
        return out

    def close(self) -> None:
        if self._conn is not None and self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(None)
                self._proc.join(timeout=2)
            except (BrokenPipeError, OSError):
                pass
        self._kill()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class BoundedVerifier(BoundedWorker):
    """`verifier(gold, completion) -> 1.0 | 0.0`, each call at most ~timeout_s of wall time."""

    def __init__(self, timeout_s: float = 5.0, mem_mb: int = 4096):
        super().__init__(_worker, timeout_s, mem_mb, name="rlx-math-verify")

    def __call__(self, gold: str, completion: str) -> float:
        if too_complex(completion):
            self.stats["refused"] += 1
            return 0.0
        answer = self.ask((gold, completion))
        if answer is None:  # timed out or died: scored 0 (counted)
            return 0.0
        kind, value = answer
        if kind == "bounded":
            self.stats["errors"] += 1
            return 0.0
        return value


_DEFAULT: BoundedVerifier | None = None


def default_verifier() -> BoundedVerifier:
    """The process-wide verifier the `math_verify` reward uses (configured by the task)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = BoundedVerifier()
    return _DEFAULT


def configure(timeout_s: float) -> BoundedVerifier:
    """Set the process-wide verifier's time bound (task.reward_timeout_s)."""
    v = default_verifier()
    if timeout_s <= 0:
        raise ValueError(f"task.reward_timeout_s must be > 0, got {timeout_s}")
    v.timeout_s = float(timeout_s)
    return v
