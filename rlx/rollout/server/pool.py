"""vLLM OpenAI-compatible servers for `rollout=vllm_server` behind one least-load pool (docs/engine.md, "Servers").
Local servers bind loopback behind a per-run key in their environment (never argv: `ps` shows it) and die with
their process group; remote ones (`rollout.server.urls`) take their key from $RLX_VLLM_API_KEY, never a file."""

from __future__ import annotations

import atexit
import http.client
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from rlx.rollout.server.placement import CPUS_ENV, server_env
from rlx.run.logging import say

KEY_ENV = "RLX_VLLM_API_KEY"  # the key of remote servers (rollout.server.urls)
SERVER_KEY_ENV = "VLLM_API_KEY"  # where a local server reads its key (vllm/envs.py); never argv


class ServerError(RuntimeError):
    """A server answered with an error, or not at all (`unreachable`); the message names the server."""

    def __init__(self, msg: str, unreachable: bool = False):
        super().__init__(msg)
        self.unreachable = unreachable


class Server:
    """One server's address and key, and the requests in flight on it (for least-load routing)."""

    def __init__(self, url: str, key: str | None, timeout_s: float, proc: subprocess.Popen | None = None,
                 log: Path | None = None, command: list[str] | None = None, env: dict | None = None):
        self.url, self.key, self.timeout_s, self.proc, self.log = url.rstrip("/"), key, timeout_s, proc, log
        self.command, self.env = command, env  # a local server's, to restart it
        self.in_flight = self.restarts = 0
        self.restart_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"server {self.url}"

    def request(self, path: str, body: dict | None = None, timeout_s: float | None = None):
        """POST `body` as JSON (GET when None); the parsed JSON answer, or ServerError naming the server."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        req = urllib.request.Request(self.url + path, data=data, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s or self.timeout_s) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            raise ServerError(f"{self}{path}: HTTP {e.code}: {e.read().decode(errors='replace')[:500]}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:  # refused, reset, cut short
            raise ServerError(f"{self}{path}: {type(e).__name__}: {e}", unreachable=True) from None
        try:
            return json.loads(raw) if raw.strip() else None
        except json.JSONDecodeError:  # the LoRA endpoints answer in plain text
            return raw.decode(errors="replace")

    def healthy(self) -> bool:
        try:
            self.request("/health", timeout_s=5.0)
            return True
        except ServerError:
            return False

    def log_tail(self, lines: int = 30) -> str:
        if self.log is None or not self.log.is_file():
            return "(no log)"
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(model_dir: str, port: int, *, lora_rank: int | None, max_model_len: int, dtype: str,
                   seed: int, max_num_seqs: int, kv_cache_gb: float = 0.0, tensor_parallel: int = 1,
                   kv_cache_bytes: int = 0, max_num_batched_tokens: int = 0,
                   gpu_memory_utilization: float | None = None, enforce_eager: bool = True) -> list[str]:
    """One local server's command (the module: the `vllm` script fails on CPU builds). As the colocated engine:
    processed log-probs, whole prefills; no prefix cache (blocks would outlive an adapter's version). The key is in
    its environment, the KV cache `kv_cache_bytes` (else `kv_cache_gb`), or on a GPU vLLM's profiler sizes it."""
    kv_bytes = int(kv_cache_bytes) or int(kv_cache_gb * (1 << 30))
    step = [] if not max_num_batched_tokens else ["--max-num-batched-tokens", str(int(max_num_batched_tokens))]
    lora = [] if lora_rank is None else ["--enable-lora", "--max-lora-rank", str(lora_rank), "--max-loras", "2"]
    tp = [] if tensor_parallel == 1 else ["--tensor-parallel-size", str(tensor_parallel)]
    memory = (["--kv-cache-memory-bytes", str(kv_bytes)] if gpu_memory_utilization is None
              else ["--gpu-memory-utilization", repr(float(gpu_memory_utilization))])
    eager = ["--enforce-eager"] if enforce_eager else []
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
            "--served-model-name", "base", "--host", "127.0.0.1", "--port", str(port), *lora, *tp,
            "--max-model-len", str(max_model_len), "--dtype", dtype, "--seed", str(seed),
            "--max-num-seqs", str(max_num_seqs), *step, *memory, "--logprobs-mode", "processed_logprobs",
            "--no-enable-chunked-prefill", "--long-prefill-token-threshold", "0", *eager, "--no-enable-prefix-caching"]


# A server's process-group leader, pinned to its cores: it kills the group once its starter is gone (even kill -9).
WATCHDOG = f"""
import os, signal, subprocess, sys, time
parent = int(sys.argv[1])
CPUS_ENV = {CPUS_ENV!r}
cpus = os.environ.get(CPUS_ENV)  # rollout.server.placement cpu:<cores>: the server inherits it
if cpus:
    os.sched_setaffinity(0, {{int(c) for c in cpus.split(",")}})
child = subprocess.Popen(sys.argv[2:])
while child.poll() is None:
    if os.getppid() != parent:
        os.killpg(0, signal.SIGKILL)
    time.sleep(1.0)
sys.exit(child.returncode)
"""


def _spawn(command: list[str], log: Path, env: dict) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-c", WATCHDOG, str(os.getpid()), *command], stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)


def start_local(command: list[str], log: Path, env: dict, url: str, key: str, timeout_s: float) -> Server:
    """One server under its watchdog in their own process group; its key in its environment (kept by a restart)."""
    env = {**env, SERVER_KEY_ENV: key}
    return Server(url, key, timeout_s, proc=_spawn(command, log, env), log=log, command=command, env=env)


def stop(server: Server, grace_s: float = 10.0) -> None:
    """Kill a local server's whole process group (vLLM starts workers of its own)."""
    proc = server.proc
    if proc is None or proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def wait_healthy(servers: list[Server], timeout_s: float) -> None:
    """Until every server answers /health; one that exits or misses the deadline fails with its log's tail."""
    deadline = time.monotonic() + timeout_s
    pending = list(servers)
    while pending:
        for s in list(pending):
            if s.proc is not None and s.proc.poll() is not None:
                raise ServerError(f"{s} exited with status {s.proc.returncode} before it was healthy; "
                                  f"the end of {s.log}:\n{s.log_tail()}")
            if s.healthy():
                pending.remove(s)
        if pending and time.monotonic() > deadline:
            tails = "\n".join(f"--- {s} ({s.log}):\n{s.log_tail()}" for s in pending)
            raise ServerError(f"{len(pending)} server(s) not healthy after {timeout_s:.0f} s "
                              f"(rollout.server.startup_timeout_s):\n{tails}")
        if pending:
            time.sleep(1.0)


class ServerPool:
    """The servers of one run, least-load routing, and their shutdown."""

    def __init__(self, servers: list[Server], startup_timeout_s: float = 900.0):
        self.servers = servers
        self.startup_timeout_s = startup_timeout_s
        self.on_restart = None  # callable(server): what a restarted server must load again (the adapters)
        self._lock = threading.Lock()
        atexit.register(self.close)

    @classmethod
    def local(cls, n: int, command_for, log_dir: Path, env: dict, timeout_s: float,
              request_timeout_s: float, placement: list[str] | None = None) -> "ServerPool":
        """Start `n` local servers (`command_for(port, placement entry or None)`) and wait for them."""
        key = secrets.token_urlsafe(24)  # per run: only this process can load adapters or sample
        log_dir.mkdir(parents=True, exist_ok=True)
        servers = []
        for i in range(n):
            port, entry = free_port(), placement[i] if placement else None
            servers.append(start_local(command_for(port, entry), log_dir / f"server_{i}.log",
                                       server_env(entry, env), f"http://127.0.0.1:{port}", key, request_timeout_s))
        pool = cls(servers, timeout_s)
        try:
            wait_healthy(servers, timeout_s)
        except BaseException:
            pool.close()
            raise
        return pool

    @classmethod
    def remote(cls, urls: list[str], timeout_s: float, request_timeout_s: float) -> "ServerPool":
        """Running servers at `urls`, with the key from $RLX_VLLM_API_KEY (or none)."""
        key = os.environ.get(KEY_ENV) or None
        servers = [Server(u, key, request_timeout_s) for u in urls]
        wait_healthy(servers, timeout_s)
        return cls(servers, timeout_s)

    def acquire(self) -> Server:
        """The server with the fewest requests in flight (ties: the first), counted as busy until release."""
        with self._lock:
            s = min(self.servers, key=lambda x: x.in_flight)
            s.in_flight += 1
            return s

    def release(self, server: Server) -> None:
        with self._lock:
            server.in_flight -= 1

    def drop(self, server: Server, error: ServerError) -> None:
        """A server stopped answering: a local one is restarted, a remote one leaves the pool (none left: fail)."""
        if server.proc is not None:
            self.restart(server, error)
            return
        with self._lock:
            if server in self.servers:
                self.servers.remove(server)
                say(f"[warn] rollout=vllm_server: {server} stopped answering ({error}); taken out of the pool, "
                    f"{len(self.servers)} left")
            if not self.servers:
                raise ServerError(f"rollout=vllm_server: no server left in the pool (the last: {error})")

    def restart(self, server: Server, error: ServerError) -> None:
        with server.restart_lock:
            if server.healthy():  # another request's thread restarted it already
                return
            if server.command is None or server.restarts >= 3:
                raise ServerError(f"{server} stopped answering and cannot be restarted "
                                  f"({server.restarts} restarts so far): {error}") from None
            say(f"[warn] rollout=vllm_server: {server} stopped answering ({error}); restarting it "
                f"(log: {server.log})")
            stop(server)
            server.restarts += 1
            server.proc = _spawn(server.command, server.log, server.env)
            wait_healthy([server], self.startup_timeout_s)
            if self.on_restart is not None:
                self.on_restart(server)

    def close(self) -> None:
        for s in self.servers:
            stop(s)
