"""`rollout=vllm_server`: generation on vLLM servers out of the trainer's process (docs/engine.md, "Servers"):
token ids in and out, a seed per row; weights by runtime LoRA loading or an in-place reload (`/collective_rpc`),
and after each load a canary compares every server's probe log-probs with the trainer's."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from rlx.models.forward import token_logprobs
from rlx.run.logging import say
from rlx.rollout.base import RolloutBatch, RolloutEngine, SamplingParams, draw_seeds, encode_prompts, sampled_batch
from rlx.rollout.kv_sizing import DTYPE_BYTES, plan_for_engine
from rlx.rollout.config import enforce_eager
from rlx.rollout.server.placement import check_machine, gpu_share, tensor_parallel
from rlx.rollout.server.pool import ServerError, ServerPool, server_command
from rlx.rollout import vllm_setup  # vllm_on_cpu through the module: a test's stub of it must not stick
from rlx.rollout.vllm_setup import check_local_vllm, engine_max_model_len, lora_slot, sync_mode
from rlx.rollout.vllm_weights import full_state_dict, merged_state_dict

# the largest mean |log-prob server - trainer| over the probe (fp32 agrees closely, bf16 rounds; docs/engine.md)
CANARY_TOL = {torch.float32: 1e-3, torch.bfloat16: 0.1}
CANARY_TEXT = "12+30=42"  # the probe: short, so that it fits the smallest context a task needs


class VLLMServerEngine(RolloutEngine):
    on_finished = None  # optional callable(rows, tokens) as each request returns (evaluation's progress)

    @classmethod
    def check_config(cls, cfg) -> None:
        """What the server engine does not do (yet), refused before any model is built."""
        for bad, what in ((cfg.quant.format != "none", f"quant.format={cfg.quant.format} (servers load the 16-bit "
                                                       f"base)"),
                          (cfg.noise.type != "none", "noise=aqn (AQN perturbs the norm weights of an engine in this "
                                                     "process)"),
                          (cfg.algo.fp32_lm_head and cfg.trainer.dtype == "bf16", "algo.fp32_lm_head with "
                                                                                 "trainer.dtype=bf16")):
            if bad:
                raise ValueError(f"rollout=vllm_server with {what} is not supported; use rollout=vllm or rollout=hf")
        if cfg.rollout.server.num > 0:  # local servers run this machine's vLLM: its limits (head_dim on CPU)
            check_machine(list(cfg.rollout.server.placement))  # the cores / GPUs they are placed on exist here
            try:
                check_local_vllm(cfg)
            except ValueError as e:
                raise ValueError(str(e).replace("rollout=vllm:", "rollout=vllm_server (local servers):", 1)) from None

    def __init__(self, cfg, tokenizer, policy, trainer, fp32_head: bool = False, base_dir: str | None = None,
                 seed: int = 0, max_len: int | None = None, quant_format: str = "none", own_weights: bool = True,
                 log_dir=None):
        if base_dir is None:
            raise ValueError("rollout=vllm_server needs the base model directory (config.json) the servers load")
        self.cfg, self.tok, self.dtype = cfg, tokenizer, trainer.dtype
        sc = cfg.server
        if sc.shared_dir:  # servers on other nodes read what this rank writes there
            Path(sc.shared_dir).mkdir(parents=True, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix="rlx-adapters-", dir=sc.shared_dir or None))  # servers load only here
        # under torchrun every rank syncs its own copy to the servers it shares: names must not collide
        self.rank = int(os.environ.get("RANK", "0"))
        lora = hasattr(policy, "peft_config")
        self.mode = sync_mode("adapter" if cfg.vllm.sync == "auto" and lora else cfg.vllm.sync, "none", lora=lora)
        self.kv_plan = None
        self.concurrency = int(cfg.vllm.max_num_seqs) * max(1, len(sc.urls) or int(sc.num))  # at once, all servers
        self._progress_lock = threading.Lock()
        if sc.urls:
            self.pool = ServerPool.remote(list(sc.urls), sc.startup_timeout_s, sc.request_timeout_s)
        else:
            rank = None if self.mode != "adapter" else lora_slot(max(int(policy.peft_config[a].r)
                                                                     for a in policy.peft_config))
            dtype = "bfloat16" if self.dtype == torch.bfloat16 else "float32"
            max_model_len = engine_max_model_len(cfg.vllm, base_dir, max_len)
            on_cpu = vllm_setup.vllm_on_cpu()  # local servers run this machine's vLLM build
            if on_cpu:
                # the colocated engine's rule, the batch and free memory shared among the servers
                self.kv_plan = plan_for_engine(cfg, base_dir, DTYPE_BYTES[dtype], max_len, max_model_len, tokenizer,
                                               shares=int(sc.num))
                say(f"[vllm_server] each of {int(sc.num)} server(s): {self.kv_plan.describe()}")
                self.concurrency = int(sc.num) * max(1, self.kv_plan.concurrency)
            command = command_maker(cfg, base_dir, on_cpu=on_cpu, dtype=dtype, seed=seed, max_model_len=max_model_len,
                                    lora_rank=rank, kv_plan=self.kv_plan)
            logs = Path(log_dir) if log_dir is not None else self.root / "logs"  # server_<i>.log each
            self.pool = ServerPool.local(int(sc.num), command, logs, _server_env(sc.threads, self.mode != "adapter"),
                                         sc.startup_timeout_s, sc.request_timeout_s, list(sc.placement))
        self.pool.on_restart = self._reload
        self.loaded: dict[int, tuple[str, Path]] = {}  # version -> (adapter name on every server, its directory)
        self.weights: Path | None = None  # merged / full: the directory every server holds now
        self.keep = int(cfg.max_staleness) + 2  # stale mode asks again for versions up to k updates old
        self._exports, self.version, self.current = 0, -1, None  # current: the adapter name requests give
        self.sync_s = 0.0  # the last sync's seconds (save, load on every server, canary)
        self.canary_diff = float("nan")
        self.sync(policy, 0)

    def export_weights(self, policy):
        """Trainer side: the weights saved atomically, and the probe log-probs for the canary."""
        self._exports += 1
        kind = "adapter" if self.mode == "adapter" else "weights"
        final = self.root / f"{kind}_{self._exports}"
        tmp = self.root / f".tmp-{kind}_{self._exports}"
        if self.mode == "adapter":
            policy.save_pretrained(tmp)
        else:
            from safetensors.torch import save_file

            state = (merged_state_dict if self.mode == "merged" else full_state_dict)(policy, self.dtype)
            tmp.mkdir()  # a tied head shares the embedding's storage: safetensors wants each tensor once
            save_file({k: v.detach().cpu().contiguous().clone() for k, v in state.items()}, tmp / "model.safetensors")
        os.replace(tmp, final)
        return final, _probe_logprobs(policy, self._probe_ids())

    def sync(self, policy, version: int) -> None:
        if version in self.loaded and self.mode == "adapter":  # stale mode asks again for a version the servers still hold
            self.current, self.version = self.loaded[version][0], int(version)
            return
        self.load_weights(self.export_weights(policy), version)

    def load_weights(self, payload, version: int) -> None:
        """Load version `version`'s adapter on every server, check it (canary), retire old versions."""
        t0 = time.time()
        path, want = payload
        path = Path(path).resolve()
        if self.root.resolve() not in path.parents:
            raise ValueError(f"rollout=vllm_server: refusing to load {path}, outside the run's adapter "
                             f"directory {self.root}")
        name = f"rlx-r{self.rank}-v{int(version)}-{path.name}" if self.mode == "adapter" else "base"
        for s in list(self.pool.servers):
            try:
                self._load_on(s, name, path)
            except ServerError as e:
                if not e.unreachable:
                    raise
                self.pool.drop(s, e)
        if self.mode == "adapter":
            self.loaded[int(version)] = (name, path)
        else:  # a server holds one set of weights: the previous directory is not needed again
            old, self.weights = self.weights, path
            if old is not None and old != path:
                shutil.rmtree(old, ignore_errors=True)
        self.current, self.version = name, int(version)
        if self.cfg.server.canary:
            self.canary_diff = self._canary(want, version)
        for v in sorted(self.loaded)[: -self.keep]:
            self._retire(v)
        self.sync_s = time.time() - t0

    def _load_on(self, server, name: str, path: Path) -> None:
        """One server takes version `name` at `path`: a runtime LoRA load, or an in-place weight reload."""
        if self.mode == "adapter":
            server.request("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
        else:
            server.request("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(path)}})

    def _reload(self, server) -> None:
        """A restarted server loads every adapter version the schedule may still name, or the weights now served."""
        for name, path in self.loaded.values():
            self._load_on(server, name, path)
        if self.weights is not None:
            self._load_on(server, "base", self.weights)

    def _retire(self, version: int) -> None:
        name, path = self.loaded.pop(version)
        for s in self.pool.servers:
            try:
                s.request("/v1/unload_lora_adapter", {"lora_name": name})
            except ServerError:
                pass  # a server that cannot unload keeps serving the newer names; nothing asks for this one
        shutil.rmtree(path, ignore_errors=True)

    def _probe_ids(self) -> list[int]:
        return self.tok(CANARY_TEXT, add_special_tokens=False).input_ids

    def _canary(self, want: torch.Tensor, version: int) -> float:
        """Every server's prompt log-probs of the probe against the trainer's: the largest mean difference."""
        ids, tol, worst = self._probe_ids(), self.cfg.server.canary_tol or CANARY_TOL[self.dtype], 0.0
        for s in self.pool.servers:
            # temperature 1: the processed log-probs are the model's own
            out = s.request("/v1/completions", {"model": self.current, "prompt": ids, "max_tokens": 1,
                                                "temperature": 1.0, "seed": 0, "prompt_logprobs": 0})
            got = torch.tensor([next(iter(d.values()))["logprob"] if len(d) == 1 else d[str(t)]["logprob"]
                                for d, t in zip(out["choices"][0]["prompt_logprobs"][1:], ids[1:])])
            diff = float((got - want).abs().mean())
            if not diff <= tol:  # NaN fails too
                raise ServerError(f"sync canary: {s} serves other weights than the trainer's version {version} "
                                  f"(probe log-probs differ by {diff:.3g} on average > {tol:g}, "
                                  f"rollout.server.canary_tol); it may still hold an old adapter")
            worst = max(worst, diff)
        return worst

    def metrics(self) -> dict:
        return {"rollout/sync_canary/mean_abs_diff": self.canary_diff, "timing_s/server_sync": self.sync_s,
                "rollout/server/adapters_loaded": float(len(self.loaded))}

    def noise_target(self):
        raise NotImplementedError("rollout=vllm_server: AQN needs an engine whose weights live in this process")

    @torch.no_grad()
    def generate(self, prompts, n, sampling: SamplingParams, generator, seeds=None):
        ids, mask = encode_prompts(self.tok, prompts)  # [B, P] left-padded
        stop = [self.tok.eos_token_id, *sampling.stop_token_ids]
        seeds = draw_seeds(generator, len(prompts) * n) if seeds is None else list(seeds)
        # stop strings (SamplingParams.stop): the server's detokenizer (specials kept) ends a request there
        strings = {"stop": list(sampling.stop), "include_stop_str_in_output": True} if sampling.stop else {}
        bodies = []
        for i in range(len(prompts)):
            prompt = ids[i][mask[i].bool()].tolist()
            for j in range(n):
                bodies.append({"model": self.current, "prompt": prompt, "max_tokens": sampling.max_tokens,
                               "temperature": sampling.temperature, "top_p": sampling.top_p,
                               "top_k": sampling.top_k or -1, "stop_token_ids": stop, "logprobs": 0,
                               "return_token_ids": True, "skip_special_tokens": False, **strings,
                               **({"seed": seeds[i * n + j]} if sampling.temperature > 0 else {})})
        # as many requests in flight as the servers' KV caches hold (more would only queue, or preempt)
        with ThreadPoolExecutor(max_workers=max(1, min(len(bodies), self.concurrency))) as ex:
            outs = list(ex.map(self._complete, bodies))
        return self._batch(ids, mask, outs, n, set(stop))

    def _complete(self, body: dict) -> dict:
        """One request on the least-loaded server, re-sent if it stops answering (its seed keeps the sample)."""
        while True:
            server = self.pool.acquire()
            try:
                out = server.request("/v1/completions", body)["choices"][0]
                if self.on_finished is not None:  # requests return on several threads
                    with self._progress_lock:
                        self.on_finished(1, len(out["token_ids"]))
                return out
            except ServerError as e:
                if not e.unreachable:
                    raise
                self.pool.drop(server, e)
            finally:
                self.pool.release(server)

    def _batch(self, ids, mask, outs: list[dict], n: int, stop_ids: set[int]) -> RolloutBatch:
        batch = sampled_batch(self.tok, ids, mask, n, [(o["token_ids"], o["logprobs"]["token_logprobs"],
                                                        o["finish_reason"] == "length") for o in outs], stop_ids)
        # [N, T] the adapter each request named
        batch.token_version = torch.where(batch.completion_mask.bool(), self.version, -1)
        batch.version = torch.full((len(outs),), self.version, dtype=torch.long)
        return batch

    def close(self) -> None:
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool.close()
        shutil.rmtree(getattr(self, "root", ""), ignore_errors=True)


def command_maker(cfg, base_dir, *, on_cpu: bool, dtype: str, seed: int, max_model_len: int, lora_rank: int | None,
                  kv_plan=None):
    """`(port, placement entry) -> argv` of a local server: on CPU the work-sized KV cache (`kv_plan`), on a GPU
    its part of rollout.vllm.gpu_memory_utilization (placement.gpu_share), sized by vLLM's profiler."""
    entries = list(cfg.server.placement) or [None] * int(cfg.server.num)
    seqs = max(1, kv_plan.concurrency) if on_cpu else int(cfg.vllm.max_num_seqs)

    def make(port: int, entry: str | None) -> list[str]:
        memory = (dict(kv_cache_bytes=kv_plan.bytes) if on_cpu else
                  dict(gpu_memory_utilization=gpu_share(entry, entries, float(cfg.vllm.gpu_memory_utilization))))
        return server_command(str(base_dir), port, lora_rank=lora_rank, max_model_len=max_model_len, dtype=dtype,
                              seed=seed, max_num_seqs=seqs, tensor_parallel=tensor_parallel(entry),
                              max_num_batched_tokens=int(cfg.vllm.max_num_batched_tokens),
                              enforce_eager=enforce_eager(cfg.vllm, on_cpu), **memory)

    return make


def _server_env(threads: int, reload: bool = False) -> dict:
    """A local server's environment; `reload` (merged / full): vLLM's dev mode, which offers /collective_rpc."""
    env = dict(os.environ, VLLM_ALLOW_RUNTIME_LORA_UPDATING="True", VLLM_CPU_OMP_THREADS_BIND="nobind",
               OMP_NUM_THREADS=str(threads))
    if reload:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # a server runs its engine core as it chooses
    return env


def _probe_logprobs(policy, ids: list[int]) -> torch.Tensor:
    """The trainer's log-probs of the probe's tokens 1.. (what a server's prompt_logprobs give)."""
    x = torch.tensor([ids], device=next(policy.parameters()).device)
    was = policy.training
    policy.eval()
    try:
        with torch.no_grad():
            lp = token_logprobs(policy, x, torch.ones_like(x), len(ids) - 1)  # [1, P-1]
    finally:
        policy.train(was)
    return lp[0].float().cpu()
