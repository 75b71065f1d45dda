"""The `rollout.*` schema and every check of a single rollout value, run by `__post_init__` when
rlx.config.preflight converts the node; checks that read other groups are preflight's or the engine's."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Optional

SCHEDULE_MODES = ("sync", "stale", "async")  # rollout.mode (rlx.rollout.schedule)
STALENESS_POLICIES = ("pace", "drop")  # rollout.staleness_policy (async)


@dataclass
class VLLMConfig:
    """Knobs of the colocated vLLM engine (`rollout=vllm`); see docs/engine.md."""

    gpu_memory_utilization: float = field(default=0.3, metadata={
        "help": "GPU: fraction of device memory vLLM may take (weights + KV cache)"})
    kv_cache_gb: float = field(default=0.0, metadata={
        "help": "CPU: KV-cache size in GiB; 0 = sized to the work: the batch the schedule submits x (longest prompt + "
                "budget) x the model's KV bytes per token, capped by free memory (rlx.rollout.kv_sizing, "
                "docs/engine.md); a number wins (vLLM's CPU backend has no memory profiling)"})
    max_model_len: int = field(default=0, metadata={
        "help": "0 => twice the longest sampled task prompt + max new tokens, capped by the model"})
    enforce_eager: str = field(default="auto", metadata={
        "help": "no CUDA graphs / torch.compile: auto (true on CPU: a fast start, inductor gained nothing there; false "
                "on a GPU: CUDA graphs, without which decode is launch-bound) | true | false"})
    sleep_mode: bool = field(default=False, metadata={
        "help": "GPU: free vLLM's memory during the update, wake it for generation"})
    max_num_seqs: int = field(default=256, metadata={
        "help": "sequences vLLM schedules at once (on CPU also as many as the KV cache holds)"})
    max_num_batched_tokens: int = field(default=0, metadata={
        "help": "CPU: tokens vLLM schedules in one step (prefill + decode); 0 = vLLM's default (4096 colocated, 2048 "
                "on a server, at least max_model_len without chunked prefill)"})
    prefix_caching: bool = field(default=True, metadata={
        "help": "CPU, colocated: reuse the KV blocks of a shared prompt prefix (each group's prompt is prefilled once; "
                "the cache is dropped at every weight sync)"})
    sync: str = field(default="auto", metadata={
        "help": "how LoRA reaches the engine: merged (W + sBA reloaded in place; fastest, docs/engine.md; a quantized "
                "base's W is its dequantized values, served dense) | adapter (a PEFT adapter saved per sync, served as "
                "a LoRA request on top of the packed NVFP4 export; GPU only) | auto (merged, or adapter for an nvfp4 "
                'base on a GPU). On a GPU an adapter is served in bf16 (docs/engine.md, "On a GPU")'})


@dataclass
class InterruptConfig:
    """ScaleRL's forced length interruption (rlx/rollout/interrupt.py)."""

    enabled: bool = field(default=False, metadata={
        "help": "append the phrase to completions that hit max_new_tokens and let them answer"})
    phrase: str = field(default="Okay, time is up. Let me stop thinking and formulate a final answer now.", metadata={
        "help": "the interruption text (ScaleRL's by default)"})
    answer_tokens: int = field(default=8, metadata={"help": "extra tokens allowed after the phrase"})
    mask_interrupted: bool = field(default=False, metadata={
        "help": "drop interrupted rows from the loss (the phrase never enters it)"})


_PLACEMENT = re.compile(r"^(cpu|cuda):(\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*)$")


def parse_placement(entry: str) -> tuple[str, list[int]]:
    """'cpu:0-2,5' -> ('cpu', [0, 1, 2, 5]); ValueError naming the entry when it is not of that form."""
    m = _PLACEMENT.match(str(entry).strip())
    if m is None:
        raise ValueError(f"rollout.server.placement: '{entry}' is not 'cpu:<cores>' or 'cuda:<ids>' "
                         f"(e.g. cpu:0-3, cpu:4,6, cuda:0, cuda:2,3)")
    ids: list[int] = []
    for part in m.group(2).split(","):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if b < a:
            raise ValueError(f"rollout.server.placement: '{entry}': the range {part} runs backwards")
        ids.extend(range(a, b + 1))
    if len(set(ids)) != len(ids):
        raise ValueError(f"rollout.server.placement: '{entry}' names a {m.group(1)} id twice")
    return m.group(1), ids


@dataclass
class ServerConfig:
    """`rollout=vllm_server`: vLLM OpenAI-compatible servers out of the trainer's process (rlx.rollout.server)."""

    num: int = field(default=1, metadata={
        "help": "local servers rlx starts (loopback, a per-run API key, one log each); 0 with urls"})
    urls: list[str] = field(default_factory=list, metadata={
        "help": "running servers to use instead (their key: $RLX_VLLM_API_KEY, never a config file)"})
    threads: int = field(default=1, metadata={"help": "CPU: OpenMP threads of each local server"})
    startup_timeout_s: float = field(default=900.0, metadata={
        "help": "a server not healthy by then fails the run with its log's tail"})
    request_timeout_s: float = field(default=600.0, metadata={"help": "one completion request's limit"})
    canary: bool = field(default=True, metadata={
        "help": "after every sync, each server's log-probs of a probe must equal the trainer's"})
    canary_tol: float = field(default=0.0, metadata={
        "help": "the canary's largest mean |log-prob difference| over the probe; 0 = by dtype (fp32 1e-3, bf16 0.1)"})
    shared_dir: str = field(default="", metadata={
        "help": "an absolute directory every server can read (a shared filesystem for servers on other nodes): the run "
                "writes its adapters / weights under it; empty: a local temporary one"})
    placement: list[str] = field(default_factory=list, metadata={
        "help": "one entry per local server: cpu:<cores> (pinned: cpu:0-3) or cuda:<ids> (its GPUs; several: tensor "
                "parallel); empty: the servers share the machine"})

    def __post_init__(self) -> None:
        if self.num < 0 or (self.num > 0) == bool(self.urls):
            raise ValueError(f"rollout.server: give either rollout.server.num >= 1 (local servers) or "
                             f"rollout.server.urls with rollout.server.num=0; got num={self.num}, urls={list(self.urls)}")
        for key in ("threads", "startup_timeout_s", "request_timeout_s"):
            if not 0 < getattr(self, key) < math.inf:
                raise ValueError(f"rollout.server.{key} must be > 0, got {getattr(self, key)}")
        if not 0 <= self.canary_tol < math.inf:
            raise ValueError(f"rollout.server.canary_tol must be >= 0 (0 = by dtype), got {self.canary_tol}")
        if self.placement:
            if len(self.placement) != self.num:
                raise ValueError(f"rollout.server.placement has {len(self.placement)} entries for "
                                 f"rollout.server.num={self.num} local servers: give one per server (or none)")
            for entry in self.placement:
                parse_placement(entry)
        if self.shared_dir and not self.shared_dir.startswith("/"):
            raise ValueError(f"rollout.server.shared_dir must be an absolute path (the servers resolve it on their "
                             f"own nodes), got '{self.shared_dir}'")


@dataclass
class RolloutConfig:
    """`engine`: a registered rollout engine; `mode`: the schedule (rlx/rollout/schedule.py, docs/offpolicy.md)."""

    engine: str = field(default="hf", metadata={"help": "rollout engine: hf | vllm | vllm_server"})
    mode: str = field(default="sync", metadata={"help": "sync | stale | async (docs/offpolicy.md)"})
    max_staleness: int = field(default=0, metadata={
        "help": "k: policy versions a sample may lag behind the trainer (stale / async)"})
    staleness_policy: str = field(default="pace", metadata={
        "help": "async: pace (the generator waits when k batches are queued or in flight: nothing goes stale) | drop "
                "(it runs up to queue_batches ahead; groups older than k are discarded, counted, and their prompts "
                "generated again)"})
    queue_batches: int = field(default=0, metadata={
        "help": "async, drop: batches the generator may have queued or in flight; 0 = 2 x max_staleness"})
    group_size: int = field(default=8, metadata={"help": "G"})
    prompts_per_step: int = field(default=16, metadata={"help": "B"})
    temperature: float = field(default=1.0, metadata={"help": "training sampling temperature (> 0)"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling mass in (0, 1]"})
    top_k: int = field(default=0, metadata={"help": "0 => off"})
    max_new_tokens: int = field(default=8, metadata={
        "help": "completion budget per training sample (the thinking budget with forced interruption)"})
    stop_token_ids: list[int] = field(default_factory=list, metadata={"help": "extra stop tokens besides eos"})
    eval_max_new_tokens: Optional[int] = field(default=None, metadata={
        "help": "completion budget for evaluation (null = max_new_tokens)"})
    eval_k: int = field(default=4, metadata={"help": "mean@k samples per held-out prompt"})
    eval_temperature: float = field(default=1.0, metadata={"help": "temperature of the mean@k samples"})
    eval_top_p: Optional[float] = field(default=None, metadata={
        "help": "nucleus mass of the mean@k samples (null = rollout.top_p)"})
    eval_top_k: Optional[int] = field(default=None, metadata={
        "help": "top-k of the mean@k samples (null = rollout.top_k; 0 = off)"})
    eval_chunk: int = field(default=0, metadata={
        "help": "sequences per engine call in evaluation, progress reported after each (docs/eval.md); 0 = sized by "
                "the speed of the calls so far (~30 s each), up to the engine's own batch (hf batch_size, vllm "
                "max_num_seqs)"})
    batch_size: int = field(default=512, metadata={"help": "hf: sequences generated at once"})
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    interrupt: InterruptConfig = field(default_factory=InterruptConfig)

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        _check_sampling(self)
        _check_evaluation(self)
        _check_schedule(self)
        enforce_eager(self.vllm, on_cpu=True)  # the value's spelling; its meaning waits for the device


def _refuse(rules) -> None:
    for ok, key, why, value in rules:
        if not ok:
            raise ValueError(f"rollout.{key} {why}; got {value!r}")


EAGER_CHOICES = ("auto", "true", "false")  # rollout.vllm.enforce_eager (a YAML bool arrives as True / False)


def enforce_eager(vllm_cfg, on_cpu: bool) -> bool:
    """rollout.vllm.enforce_eager for an engine on this device: auto is eager on a CPU, compiled on a GPU."""
    value = str(vllm_cfg.enforce_eager).strip().lower()
    if value not in EAGER_CHOICES:
        raise ValueError(f"rollout.vllm.enforce_eager: '{vllm_cfg.enforce_eager}' is not one of {list(EAGER_CHOICES)}")
    return on_cpu if value == "auto" else value == "true"


def _check_sampling(r: RolloutConfig) -> None:
    """Training sampling (each test fails on NaN too)."""
    _refuse(((0 < r.temperature < math.inf, "temperature", "must be > 0 and finite for training rollouts (behaviour "
                                                          "log-probs of a greedy policy are not a distribution)",
              r.temperature),
             (0.0 < r.top_p <= 1.0, "top_p", "must be in (0, 1]", r.top_p),
             (r.top_k >= 0, "top_k", "must be >= 0 (0 = off)", r.top_k),
             (r.max_new_tokens >= 1, "max_new_tokens", "must be >= 1", r.max_new_tokens),
             (r.group_size >= 2, "group_size", "must be >= 2: advantages are rewards centred on their group, so a "
                                               "group of one always has advantage 0", r.group_size),
             (r.prompts_per_step >= 1, "prompts_per_step", "must be >= 1", r.prompts_per_step),
             (r.batch_size >= 1, "batch_size", "must be >= 1", r.batch_size)))


def _check_evaluation(r: RolloutConfig) -> None:
    """Validation's own sampling (rollout.eval_*; rlx.eval.evaluate.eval_sampling derives it)."""
    _refuse(((r.eval_top_p is None or 0.0 < r.eval_top_p <= 1.0, "eval_top_p", "must be in (0, 1]", r.eval_top_p),
             (r.eval_top_k is None or r.eval_top_k >= 0, "eval_top_k", "must be >= 0 (0 = off)", r.eval_top_k),
             (r.eval_max_new_tokens is None or r.eval_max_new_tokens >= 1, "eval_max_new_tokens", "must be >= 1",
              r.eval_max_new_tokens),
             (0 <= r.eval_temperature < math.inf, "eval_temperature", "must be >= 0", r.eval_temperature),
             (r.eval_k >= 0, "eval_k", "must be >= 0", r.eval_k),
             (r.eval_chunk >= 0, "eval_chunk", "must be >= 0 (0 = sized by speed, up to the engine's own batch)",
              r.eval_chunk)))


def _check_schedule(r: RolloutConfig) -> None:
    """rollout.mode / max_staleness / interrupt."""
    if r.mode not in SCHEDULE_MODES:
        raise ValueError(f"rollout.mode: '{r.mode}' is not one of {list(SCHEDULE_MODES)}")
    if r.max_staleness < 0:
        raise ValueError(f"rollout.max_staleness must be >= 0, got {r.max_staleness}")
    if r.mode == "async" and r.max_staleness < 1:
        raise ValueError("rollout.mode=async needs rollout.max_staleness >= 1 (samples from the policy being "
                         "trained cannot exist before its update); for on-policy data use rollout.mode=sync")
    if r.staleness_policy not in STALENESS_POLICIES:
        raise ValueError(f"rollout.staleness_policy: '{r.staleness_policy}' is not one of {list(STALENESS_POLICIES)}")
    if r.queue_batches < 0:
        raise ValueError(f"rollout.queue_batches must be >= 0 (0 = 2 x max_staleness), got {r.queue_batches}")
    if r.queue_batches and r.staleness_policy != "drop":
        raise ValueError(f"rollout.queue_batches={r.queue_batches} is read by rollout.staleness_policy=drop only "
                         f"(pace holds max_staleness={r.max_staleness} batches, so that no group goes stale)")
    if r.interrupt.enabled and r.interrupt.answer_tokens < 1:
        raise ValueError(f"rollout.interrupt.answer_tokens must be >= 1, got {r.interrupt.answer_tokens}")


def as_config(node) -> RolloutConfig:
    """The composed `rollout` node as a RolloutConfig, checked (its __post_init__)."""
    from omegaconf import OmegaConf

    return node if isinstance(node, RolloutConfig) else OmegaConf.to_object(node)
