"""rollout=vllm_server: the server pool (processes, routing, failures) and the engine's adapter sync and
sync canary, against stand-in processes and a stand-in HTTP server; the engine on a real vLLM server is
in the conformance suite (tests/rollout/test_conformance.py, variant vllm-server) and below, end to end."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch

from rlx.rollout.server.pool import Server, ServerError, ServerPool, start_local, stop, wait_healthy
from tests import procs
from tests.conftest import compose, read_metrics, run_tiny

HEAD_DIM_32 = ["model.hidden_size=64", "model.num_heads=2"]  # vLLM's CPU attention needs head_dim >= 32


def test_requests_go_to_the_least_loaded_server():
    pool = ServerPool([Server(f"http://127.0.0.1:{p}", None, 1.0) for p in (1, 2, 3)])
    a, b, c = pool.acquire(), pool.acquire(), pool.acquire()
    assert [s.url[-1] for s in (a, b, c)] == ["1", "2", "3"]  # each free one in turn
    pool.release(b)
    assert pool.acquire() is b  # the one that finished takes the next request
    assert [s.in_flight for s in pool.servers] == [1, 1, 1]


def _cmdlines_holding(secret: str) -> list[str]:
    """Every process on the host whose command line holds `secret` (what `ps` shows any user)."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue
        if d.name.isdigit() and secret in cmd:
            found.append(f"{d.name}: {cmd[:200]}")
    return found


@pytest.mark.integration
def test_a_local_servers_key_goes_in_its_environment_never_on_a_command_line(tmp_path):
    """Any user of the host reads a command line through ps or /proc/PID/cmdline: the key is in the server's
    environment (vLLM reads VLLM_API_KEY), which only its owner can read."""
    from rlx.rollout.server.pool import SERVER_KEY_ENV, server_command

    cmd = server_command("/m", 8000, lora_rank=None, max_model_len=64, dtype="float32", seed=0, max_num_seqs=4,
                         kv_cache_gb=0.1)
    assert not [a for a in cmd if "api-key" in a or "api_key" in a]
    key = "k-" + os.urandom(8).hex()
    digest = hashlib.sha256(key.encode()).hexdigest()  # the stand-in's own command line must not hold the key
    stand_in = [sys.executable, "-c", f"import hashlib, os, time; k = os.environ[{SERVER_KEY_ENV!r}].encode(); "
                f"assert hashlib.sha256(k).hexdigest() == {digest!r}; print('key read', flush=True); time.sleep(60)"]
    s = start_local(stand_in, tmp_path / "server_0.log", dict(os.environ), "http://127.0.0.1:9", key, 1.0)
    try:
        for _ in range(100):
            if "key read" in (tmp_path / "server_0.log").read_text():
                break
            time.sleep(0.1)
        assert "key read" in (tmp_path / "server_0.log").read_text()
        assert _cmdlines_holding(key) == []
    finally:
        stop(s)


@pytest.mark.integration
def test_a_server_that_dies_before_it_is_healthy_fails_with_its_log(tmp_path):
    cmd = [sys.executable, "-c", "import sys; print('no such model: /m', flush=True); sys.exit(3)"]
    s = start_local(cmd, tmp_path / "server_0.log", dict(os.environ), "http://127.0.0.1:9", "k", 1.0)
    with pytest.raises(ServerError, match=r"exited with status 3 before it was healthy(.|\n)*no such model: /m"):
        wait_healthy([s], timeout_s=60)


@pytest.mark.integration
def test_a_server_never_healthy_fails_after_the_timeout_with_its_log(tmp_path):
    cmd = [sys.executable, "-c", "import time; print('loading weights', flush=True); time.sleep(60)"]
    s = start_local(cmd, tmp_path / "server_0.log", dict(os.environ), "http://127.0.0.1:9", "k", 1.0)
    try:
        with pytest.raises(ServerError, match=r"not healthy after 2 s(.|\n)*loading weights"):
            wait_healthy([s], timeout_s=2)
    finally:
        stop(s)


@pytest.mark.integration
def test_closing_the_pool_leaves_no_process_of_the_server_behind(tmp_path):
    """A server starts workers of its own (vLLM's engine core): close kills its whole process group."""
    child = tmp_path / "child.pid"
    cmd = [sys.executable, "-c", "import subprocess, sys, time; "
           f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
           f"open({str(child)!r}, 'w').write(str(p.pid)); time.sleep(120)"]
    s = start_local(cmd, tmp_path / "server_0.log", dict(os.environ), "http://127.0.0.1:9", "k", 1.0)
    for _ in range(100):
        if child.exists() and child.read_text():
            break
        time.sleep(0.1)
    pids = [s.proc.pid, int(child.read_text())]
    ServerPool([s]).close()
    time.sleep(0.5)
    assert [procs.alive(pid) for pid in pids] == [False, False]


def test_placement_entries_become_cores_gpus_and_tensor_parallel():
    from rlx.rollout.config import parse_placement
    from rlx.rollout.server.placement import CPUS_ENV, server_env, tensor_parallel
    from rlx.rollout.server.pool import server_command

    assert parse_placement("cpu:0-2,5") == ("cpu", [0, 1, 2, 5]) and parse_placement("cuda:2,3") == ("cuda", [2, 3])
    assert server_env("cpu:0-2", {"A": "1"}) == {"A": "1", CPUS_ENV: "0,1,2"}
    assert server_env("cuda:2,3", {})["CUDA_VISIBLE_DEVICES"] == "2,3" and server_env(None, {"A": "1"}) == {"A": "1"}
    # ids are this process's device indices: under its own CUDA_VISIBLE_DEVICES they map through it
    assert server_env("cuda:0,2", {"CUDA_VISIBLE_DEVICES": "4,5,6"})["CUDA_VISIBLE_DEVICES"] == "4,6"
    assert [tensor_parallel(e) for e in (None, "cpu:0-3", "cuda:0", "cuda:2,3")] == [1, 1, 1, 2]
    cmd = lambda tp: server_command("/m", 8000, lora_rank=None, max_model_len=64, dtype="float32",  # noqa: E731
                                    seed=0, max_num_seqs=4, kv_cache_gb=0.1, tensor_parallel=tp)
    assert "--tensor-parallel-size" not in cmd(1) and cmd(2)[cmd(2).index("--tensor-parallel-size") + 1] == "2"


def _cpus_allowed(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split()[1]
    raise AssertionError(f"no Cpus_allowed_list for {pid}")


@pytest.mark.integration
def test_a_placed_server_and_the_processes_it_starts_run_on_its_cores_only(tmp_path):
    from rlx.rollout.server.placement import server_env

    core = max(os.sched_getaffinity(0))
    child = tmp_path / "child.pid"
    cmd = [sys.executable, "-c", "import subprocess, sys, time; "
           f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
           f"open({str(child)!r}, 'w').write(str(p.pid)); time.sleep(120)"]
    s = start_local(cmd, tmp_path / "server_0.log", server_env(f"cpu:{core}", dict(os.environ)),
                    "http://127.0.0.1:9", "k", 1.0)
    try:
        for _ in range(100):
            if child.exists() and child.read_text():
                break
            time.sleep(0.1)
        group = procs.group(s.proc.pid)
        assert len(group) == 3 and int(child.read_text()) in group  # watchdog, server, the server's worker
        assert {_cpus_allowed(pid) for pid in group} == {str(core)}
    finally:
        stop(s)


class _Fake(BaseHTTPRequestHandler):
    """A stand-in for vLLM's OpenAI-compatible server: the LoRA endpoints, and completions whose prompt
    log-probs are the trainer's own plus `shift` (a server serving other weights when shift != 0)."""

    want: list[float] = []
    shift = 0.0
    seen: list[tuple[str, dict, str | None]] = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((self.path, body, self.headers.get("Authorization")))
        if self.path == "/v1/completions":
            plp = [None] + [{str(t): {"logprob": w + self.shift}} for t, w in zip(body["prompt"][1:], self.want)]
            out = json.dumps({"choices": [{"prompt_logprobs": plp}]}).encode()
        else:
            out = b"Success"
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    _Fake.seen, _Fake.shift = [], 0.0
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def _engine_on(url: str, tmp_path: Path, mode: str = "adapter", rank: int = 0, **server):
    """A VLLMServerEngine wired to `url` without starting anything (what __init__ sets, by hand)."""
    from omegaconf import OmegaConf

    from rlx.rollout.config import RolloutConfig
    from rlx.rollout.server.engine import VLLMServerEngine
    from rlx.models.tokenizer import build_char_tokenizer

    e = VLLMServerEngine.__new__(VLLMServerEngine)
    e.cfg = OmegaConf.merge(OmegaConf.structured(RolloutConfig), {"engine": "vllm_server", "server": server})
    e.tok, e.dtype = build_char_tokenizer(), torch.float32
    e.root = tmp_path / "adapters"
    e.root.mkdir()
    e.pool = ServerPool([Server(url, "run-key", 5.0)])
    e.loaded, e.keep, e._exports, e.version, e.current = {}, 2, 0, -1, None
    e.mode, e.rank, e.weights = mode, rank, None
    e.sync_s, e.canary_diff = 0.0, float("nan")
    return e


def _adapter(e, i: int) -> Path:
    path = e.root / f"adapter_{i}"
    path.mkdir()
    return path


def test_sync_loads_the_adapter_on_the_server_checks_it_and_retires_old_versions(fake_server, tmp_path):
    e = _engine_on(fake_server, tmp_path)
    want = torch.tensor([-1.0, -2.0, -0.5])
    _Fake.want = want.tolist()
    for v in (0, 1, 2):
        e.load_weights((_adapter(e, v + 1), want), v)
    loads = [b for path, b, _ in _Fake.seen if path == "/v1/load_lora_adapter"]
    assert [b["lora_name"] for b in loads] == ["rlx-r0-v0-adapter_1", "rlx-r0-v1-adapter_2", "rlx-r0-v2-adapter_3"]
    unloaded = [b["lora_name"] for path, b, _ in _Fake.seen if path == "/v1/unload_lora_adapter"]
    assert unloaded == ["rlx-r0-v0-adapter_1"] and sorted(e.loaded) == [1, 2]  # keep = 2 versions
    assert not (e.root / "adapter_1").exists() and (e.root / "adapter_3").is_dir()
    probes = [b for path, b, _ in _Fake.seen if path == "/v1/completions"]
    assert [b["model"] for b in probes] == ["rlx-r0-v0-adapter_1", "rlx-r0-v1-adapter_2", "rlx-r0-v2-adapter_3"]
    assert e.canary_diff == 0.0 and e.version == 2 and e.current == "rlx-r0-v2-adapter_3"
    assert {auth for _, _, auth in _Fake.seen} == {"Bearer run-key"}  # every call carries the run's key


def test_ranks_sharing_a_server_load_adapters_under_names_of_their_own(fake_server, tmp_path):
    """Under torchrun every rank syncs its own copy to the servers it shares (given URLs): rank 3's names."""
    e = _engine_on(fake_server, tmp_path, rank=3)
    _Fake.want = [-1.0, -2.0]
    e.load_weights((_adapter(e, 1), torch.tensor(_Fake.want)), 7)
    assert [b["lora_name"] for p, b, _ in _Fake.seen if p == "/v1/load_lora_adapter"] == ["rlx-r3-v7-adapter_1"]
    assert e.current == "rlx-r3-v7-adapter_1"


def test_merged_sync_reloads_the_weights_on_every_server_and_keeps_only_the_current_ones(fake_server, tmp_path):
    e = _engine_on(fake_server, tmp_path, mode="merged")
    _Fake.want = [-1.0, -2.0]
    for v in (0, 1):
        d = e.root / f"weights_{v + 1}"
        d.mkdir()
        e.load_weights((d, torch.tensor(_Fake.want)), v)
    rpc = [b for p, b, _ in _Fake.seen if p == "/collective_rpc"]
    assert rpc == [{"method": "reload_weights", "kwargs": {"weights_path": str((e.root / f"weights_{i}").resolve())}}
                   for i in (1, 2)]
    assert not [p for p, _, _ in _Fake.seen if "lora" in p]  # no LoRA endpoint in merged mode
    assert [b["model"] for p, b, _ in _Fake.seen if p == "/v1/completions"] == ["base", "base"]  # the canary
    assert not (e.root / "weights_1").exists() and (e.root / "weights_2").is_dir() and e.version == 1


def test_a_relative_shared_adapter_directory_is_refused():
    from omegaconf import OmegaConf

    from rlx.rollout.config import RolloutConfig

    with pytest.raises(ValueError, match="rollout.server.shared_dir must be an absolute path"):
        OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(RolloutConfig), {"server": {"shared_dir": "rel/dir"}}))


def test_a_server_serving_other_weights_stops_the_run_naming_it_and_the_version(fake_server, tmp_path):
    e = _engine_on(fake_server, tmp_path)
    _Fake.want, _Fake.shift = [-1.0, -2.0, -0.5], 0.05  # an old adapter: log-probs 0.05 off on every token
    with pytest.raises(ServerError, match=rf"sync canary: server {fake_server} serves other weights than the "
                                          r"trainer's version 4 \(probe log-probs differ by 0.05 on average"):
        e.load_weights((_adapter(e, 1), torch.tensor(_Fake.want)), 4)
    e.cfg.server.canary_tol = 0.1  # a looser tolerance lets the same server pass
    e.load_weights((_adapter(e, 2), torch.tensor(_Fake.want)), 5)
    assert e.canary_diff == pytest.approx(0.05)


def test_an_adapter_path_outside_the_run_directory_is_never_sent(fake_server, tmp_path):
    e = _engine_on(fake_server, tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    with pytest.raises(ValueError, match="refusing to load .*elsewhere, outside the run's adapter directory"):
        e.load_weights((outside, torch.zeros(3)), 0)
    assert _Fake.seen == []


@pytest.mark.parametrize("server, match", [
    ({"num": 0}, "give either rollout.server.num >= 1"),
    ({"num": 1, "urls": ["http://node2:8000"]}, "give either rollout.server.num >= 1"),
    ({"threads": 0}, "rollout.server.threads must be > 0"),
    ({"canary_tol": -1.0}, "rollout.server.canary_tol must be >= 0"),
    ({"num": 2, "placement": ["cpu:0"]}, "placement has 1 entries for rollout.server.num=2"),
    ({"placement": ["gpu:0"]}, "'gpu:0' is not 'cpu:<cores>' or 'cuda:<ids>'"),
    ({"placement": ["cpu:3-1"]}, "the range 3-1 runs backwards"),
    ({"placement": ["cpu:99999"]}, r"'cpu:99999' names cores \[99999\] this process may not use"),
    ({"placement": ["cuda:7"]}, r"'cuda:7' names GPUs \[7\]; this machine has \d+ CUDA device"),
])
def test_bad_server_settings_are_refused_before_any_model_is_built(tmp_path, server, match):
    from rlx.config.preflight import check

    overrides = ["rollout=vllm_server", f"model.cache_dir={tmp_path}"] + [
        f"rollout.server.{k}={json.dumps(v) if isinstance(v, list) else v}" for k, v in server.items()]
    with pytest.raises(ValueError, match=match):
        check(compose(overrides))
    assert not any(tmp_path.iterdir())


def test_what_the_server_engine_does_not_do_is_refused_by_name(tmp_path):
    from rlx.config.preflight import check

    for extra, what in ((["noise=aqn"], "with noise=aqn"), (["quant=nvfp4"], "with quant.format=nvfp4"),
                        (["model.num_heads=8"], r"\(local servers\): the model's head_dim 16")):
        with pytest.raises(ValueError, match=f"rollout=vllm_server {what}"):
            check(compose(["rollout=vllm_server", *extra]))


@pytest.mark.integration
def test_trains_end_to_end_on_a_local_server_with_canary_and_sync_metrics(tmp_path):
    """The default experiment's loop on one local vLLM server (sync mode), its weights synced merged (W + sBA
    reloaded in place on the server, no LoRA slot): every step's tokens come from the version just synced, the
    server's log-probs are the trainer's (fp32), and the canary held. A real server's adapter sync is the
    canary and restart tests' below (and the conformance suite's)."""
    s = run_tiny(tmp_path, HEAD_DIM_32 + ["rollout=vllm_server", "rollout.vllm.sync=merged", "train.steps=3",
                                          "train.eval_every=3", "train.ckpt_every=3", "task.n_train=60",
                                          "task.n_eval=8", "model.sft.steps=60", "rollout.eval_k=0"])
    assert s["status"] == "finished"
    rows = [r for r in read_metrics(tmp_path) if r["step"] >= 1]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["rollout/staleness/max"] == 0 and r["rollout/logprob_diff/max"] < 1e-4
        assert r["rollout/sync_canary/mean_abs_diff"] < 1e-3 and r["rollout/server/adapters_loaded"] == 0
        assert r["timing_s/server_sync"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("mode, servers", [("stale", 2), ("async", 1)])
def test_trains_end_to_end_on_servers_off_policy(tmp_path, mode, servers):
    s = run_tiny(tmp_path, HEAD_DIM_32 + ["rollout=vllm_server", f"rollout.server.num={servers}", f"rollout.mode={mode}",
                            "rollout.max_staleness=2", "train.steps=4", "train.eval_every=4", "train.ckpt_every=4",
                            "task.n_train=60", "task.n_eval=8", "model.sft.steps=60", "rollout.eval_k=0"])
    assert s["status"] == "finished"
    rows = [r for r in read_metrics(tmp_path) if r["step"] >= 1]
    assert max(r["rollout/staleness/max"] for r in rows) >= 1  # off-policy data reached the loss
    assert all(r["rollout/staleness/max"] <= 2 for r in rows)


@pytest.mark.slow
def test_full_fine_tuning_trains_end_to_end_on_a_local_server(tmp_path):
    """model.finetune=full: every weight reloads on the server at each sync (the merged end-to-end run above
    covers the reload path fast); the canary holds at every version and the server's log-probs are the trainer's."""
    s = run_tiny(tmp_path, HEAD_DIM_32 + ["rollout=vllm_server", "model.finetune=full", "train.steps=3",
                                          "train.eval_every=3", "train.ckpt_every=3", "task.n_train=60",
                                          "task.n_eval=8", "model.sft.steps=60", "rollout.eval_k=0"])
    assert s["status"] == "finished"
    rows = [r for r in read_metrics(tmp_path) if r["step"] >= 1]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["rollout/sync_canary/mean_abs_diff"] < 1e-3 and r["rollout/logprob_diff/max"] < 1e-3


@pytest.mark.integration
def test_the_canary_catches_a_real_server_still_serving_the_old_adapter(served):
    """On a real vLLM server: the trainer's policy moves on (its LoRA B changes), the server keeps the old
    adapter; the canary, given the trainer's new probe log-probs, stops the run naming server and version."""
    from rlx.rollout.server.engine import _probe_logprobs

    engine, policy, _ = served["vllm-server"]
    engine.sync(policy, engine.version + 1)
    assert engine.canary_diff < 1e-3  # same weights: fp32 server and trainer agree
    saved = {n: p.detach().clone() for n, p in policy.named_parameters() if "lora_B" in n}
    try:
        with torch.no_grad():
            for n, p in policy.named_parameters():
                if "lora_B" in n:
                    p.mul_(1.5)  # an update the server never received
        moved = _probe_logprobs(policy, engine._probe_ids())
        with pytest.raises(ServerError, match=rf"sync canary: server {engine.pool.servers[0].url} serves other "
                                              rf"weights than the trainer's version {engine.version + 1}"):
            engine._canary(moved, engine.version + 1)
    finally:
        with torch.no_grad():
            for n, p in policy.named_parameters():
                if n in saved:
                    p.copy_(saved[n])


def test_a_remote_server_that_stops_answering_leaves_the_pool_and_its_request_is_resent(fake_server, tmp_path,
                                                                                         capsys):
    e = _engine_on(fake_server, tmp_path)
    dead = Server(f"http://127.0.0.1:{_closed_port()}", "run-key", 5.0)  # remote (no process): nothing listens
    e.pool.servers.insert(0, dead)  # the least-loaded tie goes to it first
    _Fake.want = [-1.0]
    out = e._complete({"model": "base", "prompt": [1, 2]})
    assert "prompt_logprobs" in out and [s.url for s in e.pool.servers] == [fake_server]
    assert f"{dead} stopped answering" in capsys.readouterr().out
    assert [s.in_flight for s in e.pool.servers] == [0]
    e.pool.servers = [dead]
    with pytest.raises(ServerError, match="no server left in the pool"):
        e._complete({"model": "base", "prompt": [1, 2]})


def test_a_local_server_without_its_command_cannot_be_restarted_and_stops_the_run(tmp_path):
    e = _engine_on(f"http://127.0.0.1:{_closed_port()}", tmp_path)
    e.pool.servers[0].proc = object()  # local, but not started by the pool: nothing to restart it with
    try:
        with pytest.raises(ServerError, match="stopped answering and cannot be restarted .*Connection refused"):
            e._complete({"model": "base", "prompt": [1, 2]})
        assert len(e.pool.servers) == 1
    finally:
        e.pool.servers[0].proc = None  # nothing to stop at exit


@pytest.mark.slow
@pytest.mark.integration
def test_a_killed_local_server_is_restarted_reloads_its_adapters_and_samples_the_same(served):
    """kill -9 of a real local server's process group between two calls: the next request restarts it on
    its port, the adapter it was serving is loaded again, and the same seeds give the same samples. `slow` (a
    restart, ~30 s): the mid-request test below restarts, reloads and resends through the same error path (a
    refused connection and a reset one are one `except` in rlx.rollout.server.pool)."""
    from rlx.rollout.base import SamplingParams

    engine, _, _ = served["vllm-server"]
    sp, seeds = SamplingParams(temperature=1.0, max_tokens=8), list(range(100, 108))
    before = engine.generate(["3+4=", "12-5="], 4, sp, torch.Generator(), seeds=seeds)
    server = engine.pool.servers[0]
    import signal

    os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait(timeout=30)
    after = engine.generate(["3+4=", "12-5="], 4, sp, torch.Generator(), seeds=seeds)
    assert server.restarts == 1 and server.healthy()
    assert torch.equal(before.completion_ids, after.completion_ids) and before.texts == after.texts
    assert torch.allclose(before.logprobs, after.logprobs, atol=1e-5)


@pytest.mark.integration
def test_a_local_server_killed_mid_request_is_restarted_and_the_requests_in_flight_are_resent(served):
    """kill -9 of a real local server while a generate call's requests are on it: each request that lost
    its connection restarts the server (once), is sent again with its seed, and the call returns what an
    undisturbed call returns."""
    import signal

    from rlx.rollout.base import SamplingParams

    engine, _, _ = served["vllm-server"]
    prompts, sp, seeds = ["3+4=", "12-5=", "7*8=", "9-9="], SamplingParams(temperature=1.0, max_tokens=60), list(range(200, 216))
    before = engine.generate(prompts, 4, sp, torch.Generator(), seeds=seeds)
    server = engine.pool.servers[0]
    restarts = server.restarts
    got: dict = {}
    call = threading.Thread(target=lambda: got.update(batch=engine.generate(prompts, 4, sp, torch.Generator(), seeds=seeds)))
    call.start()
    deadline = time.monotonic() + 30
    while server.in_flight == 0:  # the call has taken the server: its requests are being sent / served
        assert time.monotonic() < deadline and call.is_alive()
        time.sleep(0.002)
    os.killpg(server.proc.pid, signal.SIGKILL)
    assert call.is_alive()  # the call had not returned when its server died
    call.join(timeout=900)
    assert not call.is_alive() and "batch" in got
    assert server.restarts == restarts + 1 and server.healthy()  # one restart, whichever request saw it first
    after = got["batch"]
    assert torch.equal(before.completion_ids, after.completion_ids) and before.texts == after.texts
    assert torch.allclose(before.logprobs, after.logprobs, atol=1e-5)


@pytest.mark.slow
@pytest.mark.integration
def test_merged_sync_reloads_the_weights_in_place_on_the_server(tmp_path):
    """rollout.vllm.sync=merged: W + sBA go to the server as safetensors and replace its weights in place
    (no LoRA slot): the sampled tokens' log-probs are the trainer's at every version, an update changes
    the samples, and only the current weights stay on disk. `slow` (a server start): the end-to-end run above
    syncs merged weights at every step, and the fake-server test keeps only the current ones."""
    pytest.importorskip("vllm")
    from rlx.rollout.base import SamplingParams
    from tests.rollout.conftest import make_engine
    from tests.tiny import tiny_policy

    policy, tok = tiny_policy(tmp_path / "base")
    engine = make_engine("vllm-server", policy, tok, tmp_path / "base", vllm={"sync": "merged"})
    try:
        assert engine.mode == "merged" and engine.current == "base" and engine.canary_diff < 1e-3
        sp, seeds = SamplingParams(temperature=1.0, max_tokens=12), list(range(300, 308))
        before = engine.generate(["3+4=", "12-5="], 4, sp, torch.Generator(), seeds=seeds)
        with torch.no_grad():
            for n, p in policy.named_parameters():
                if "lora_B" in n:
                    p.mul_(-2.0)
        engine.sync(policy, 1)
        assert engine.version == 1 and engine.canary_diff < 1e-3  # the server serves the new weights
        after = engine.generate(["3+4=", "12-5="], 4, sp, torch.Generator(), seeds=seeds)
        assert not torch.equal(before.completion_ids, after.completion_ids)
        assert (after.token_version[after.completion_mask.bool()] == 1).all()
        from rlx.models.forward import token_logprobs

        ids = torch.cat([after.prompt_ids, after.completion_ids], 1)
        mask = torch.cat([after.prompt_mask, after.completion_mask], 1)
        with torch.no_grad():
            mine = token_logprobs(policy, ids, mask, after.completion_ids.shape[1])  # [N, T] at T 1
        m = after.completion_mask.bool()
        assert (mine[m] - after.logprobs[m]).abs().max() < 1e-3
        assert sorted(p.name for p in engine.root.iterdir() if p.name.startswith("weights_")) == ["weights_2"]
    finally:
        engine.close()


def _listening_addresses(port: int) -> set[str]:
    """The local addresses of the sockets listening on `port` (/proc/net/tcp and tcp6), as hex."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                out.add(addr)
    return out


@pytest.mark.integration
def test_a_local_server_listens_on_loopback_only_on_its_cores_and_refuses_requests_without_the_runs_key(served):
    from urllib.parse import urlparse

    engine, _, _ = served["vllm-server"]
    server = engine.pool.servers[0]
    assert _listening_addresses(urlparse(server.url).port) == {"0100007F"}  # 127.0.0.1, no wildcard
    # placed on this process's last core (tests/rollout/conftest.py): vLLM's API server and engine core too
    group = procs.group(server.proc.pid)
    assert len(group) >= 3 and {_cpus_allowed(pid) for pid in group} == {str(max(os.sched_getaffinity(0)))}
    body = {"model": engine.current, "prompt": [1, 2, 3], "max_tokens": 1}
    for key in (None, "not-the-run-key"):
        with pytest.raises(ServerError, match="HTTP 401"):
            Server(server.url, key, 30.0).request("/v1/completions", body)
        with pytest.raises(ServerError, match="HTTP 401"):  # nor may it load an adapter
            Server(server.url, key, 30.0).request("/v1/load_lora_adapter", {"lora_name": "x", "lora_path": "/tmp"})
    assert server.request("/v1/completions", body)["choices"]  # the run's key is accepted
    assert _cmdlines_holding(server.key) == []  # it reached vLLM through VLLM_API_KEY, not a command line


def _closed_port() -> int:
    from rlx.rollout.server.pool import free_port

    return free_port()  # bound and released at once: nothing listens there


@pytest.mark.integration
def test_a_trainer_killed_with_kill_9_leaves_no_server_behind(tmp_path):
    """The trainer runs no cleanup under kill -9: each server's watchdog sees its parent gone and kills
    the server's whole process group."""
    import signal
    import subprocess

    pid_file = tmp_path / "server.pid"
    trainer = subprocess.Popen([sys.executable, "-c", (
        "import os, sys, time\n"
        "from pathlib import Path\n"
        "from rlx.rollout.server.pool import start_local\n"
        f"cmd = [sys.executable, '-c', 'import os, time; open({json.dumps(str(pid_file))}, \"w\").write(str(os.getpid())); "
        "time.sleep(300)']\n"
        f"start_local(cmd, Path({str(tmp_path / 'server_0.log')!r}), dict(os.environ), 'http://127.0.0.1:9', 'k', 1.0)\n"
        "time.sleep(300)\n")], env=dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2])))
    try:
        for _ in range(300):
            if pid_file.exists() and pid_file.read_text():
                break
            time.sleep(0.1)
        server = int(pid_file.read_text())
        assert procs.alive(server)
        trainer.send_signal(signal.SIGKILL)
        trainer.wait(timeout=30)
        for _ in range(100):
            if not procs.alive(server):
                break
            time.sleep(0.1)
        assert not procs.alive(server)  # gone within ~10 s of the trainer
    finally:
        trainer.kill()
