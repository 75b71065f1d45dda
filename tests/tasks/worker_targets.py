"""Worker targets for the WorkerPool tests (module level, so a spawn child can import them)."""

import os
import signal
import time

from rlx.tasks.workers import serve


def _echo(state, msg):
    if msg == "die":  # a crash while answering (as the memory limit kills a worker)
        os._exit(3)
    if msg == "hang":
        while True:
            time.sleep(0.05)
    return "ok", msg


def echo(conn, mem_mb, arg=None):
    serve(conn, mem_mb, lambda: None, _echo)


def exits_at_start(conn, mem_mb, arg=None):
    """Dies before it is ready, with our message unread in its pipe (the parent then sees EOFError,
    ConnectionResetError or BrokenPipeError, depending on timing)."""
    time.sleep(float(arg or 0))
    os._exit(1)


def _bad_setup():
    raise ImportError("no module named 'missing_dependency'")


def setup_raises(conn, mem_mb, arg=None):
    serve(conn, mem_mb, _bad_setup, _echo)


def _slow_setup():
    time.sleep(3.0)  # imports that take a while: never part of a call's deadline


def slow_start(conn, mem_mb, arg=None):
    serve(conn, mem_mb, _slow_setup, _echo)


def segfaults_at_start(conn, mem_mb, arg=None):
    """Set-up that crashes hard (a C extension's segfault on import): no traceback, no reply."""
    os.kill(os.getpid(), signal.SIGSEGV)


def dies_once_at_start(conn, mem_mb, arg):
    """The first worker to start (it creates the marker file `arg`) dies before it is ready; the others serve."""
    try:
        os.close(os.open(arg, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        # the marker exists, so the other worker is exiting now: give the pool a second to see it die
        # before this one is ready, so the death is counted in the batch (not after it)
        time.sleep(1.0)
        serve(conn, mem_mb, lambda: None, _echo)
        return
    os._exit(1)


def pool_in_a_loky_worker():
    """Run inside a joblib/loky worker (as `hydra/launcher=joblib` runs a job): start a pool, ask it once,
    and report the process's start method afterwards."""
    import multiprocessing as mp

    from rlx.tasks.workers import WorkerPool

    pool = WorkerPool(echo, size=1, spares=0, timeout_s=30.0)
    try:
        return pool.map(["a"]), mp.get_start_method(allow_none=True)
    finally:
        pool.close()
