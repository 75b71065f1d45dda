"""The `vllm` engine: a vLLM `LLM` colocated in the trainer process (TRL's colocate mode; docs/engine.md). Weights by
`rollout.vllm.sync`: merged (LoRA folded in, reloaded in place), adapter (a LoRA request) or full. One seed per
request, from the caller's generator; AQN perturbs vLLM's own RMSNorm weights (the paths of HF Qwen2/Llama)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import torch

from rlx.run.logging import say
from rlx.rollout.base import RolloutEngine, SamplingParams, draw_seeds, encode_prompts, sampled_batch
from rlx.rollout.kv_sizing import DTYPE_BYTES, plan_for_engine
from rlx.rollout import vllm_setup  # vllm_on_cpu through the module: a test's stub of it must not stick
from rlx.rollout.vllm_setup import (ENGINE_DTYPES, check_local_vllm, check_whole_prefills, engine_kwargs,
                                    engine_max_model_len, give_detokenizer, import_vllm, sync_mode)
from rlx.rollout.vllm_weights import adapter_rank, full_state_dict, merged_state_dict, repack_tied_head


class VLLMEngine(RolloutEngine):
    on_finished = None  # callable(rows, tokens) as each request finishes (evaluation's progress within one call)

    @classmethod
    def check_config(cls, cfg) -> None:
        check_local_vllm(cfg)

    def __init__(self, cfg, tokenizer, policy, trainer, fp32_head: bool = False, base_dir: str | None = None,
                 seed: int = 0, max_len: int | None = None, quant_format: str = "none", own_weights: bool = True,
                 **_unused):  # own_weights: vLLM holds its own copy anyway; log_dir: it logs in this process
        vllm = import_vllm()
        if fp32_head and trainer.dtype != torch.float32:
            raise ValueError("algo.fp32_lm_head with rollout=vllm: vLLM computes the LM head in the engine dtype; "
                             "use rollout=hf for an fp32 head with bf16, or trainer.dtype=fp32 (vLLM's head is fp32 then)")
        if base_dir is None:
            raise ValueError("rollout=vllm needs the base model directory (config.json) to build the engine")
        self.tok, self.cfg, self.dtype, self.on_cpu = tokenizer, cfg, trainer.dtype, vllm_setup.vllm_on_cpu()
        max_model_len = engine_max_model_len(cfg.vllm, base_dir, max_len)
        self.mode = sync_mode(cfg.vllm.sync, quant_format, lora=hasattr(policy, "peft_config"), on_cpu=self.on_cpu)
        self._tmp = tempfile.mkdtemp(prefix="rlx-vllm-")  # adapters (and a quantized export) live here
        serve_dir = self._serve_dir(policy, base_dir, quant_format)
        kwargs = engine_kwargs(cfg, serve_dir, dtype=self.dtype, max_model_len=max_model_len, seed=seed,
                               on_cpu=self.on_cpu, lora_rank=adapter_rank(policy) if self.mode == "adapter" else None,
                               world_size=trainer.world_size)
        self.concurrency = int(cfg.vllm.max_num_seqs)  # sequences vLLM runs at once (evaluation's least call)
        self.kv_plan = None
        if self.on_cpu:
            self.kv_plan = plan_for_engine(cfg, base_dir, DTYPE_BYTES[ENGINE_DTYPES[self.dtype]], max_len,
                                           max_model_len, tokenizer)
            say(f"[vllm] {self.kv_plan.describe()}")
            self.concurrency = max(1, self.kv_plan.concurrency)
            # no more in flight than the cache holds: a preempted request, recomputed, would sample by the memory
            kwargs.update(kv_cache_memory_bytes=self.kv_plan.bytes, max_num_seqs=self.concurrency)
        self._start(vllm, kwargs)
        self._detokenizes = give_detokenizer(self.llm, tokenizer)  # stop strings (SamplingParams.stop)
        self.lora_request, self._n_adapters, self.sleeping, self.version = None, 0, False, -1
        self.sync(policy, 0)

    def _serve_dir(self, policy, base_dir, quant_format: str):
        """The base's files, or (sync=adapter on a quantized base) rlx's NVFP4 compressed-tensors export."""
        if quant_format == "none":
            return base_dir
        if self.mode != "adapter":
            # the first sync overwrites every quantized layer with its dequantized values (adapter merged in)
            say(f"[vllm] quant.format={quant_format} with sync={self.mode}: vLLM serves the base's dequantized "
                f"values as dense {ENGINE_DTYPES[self.dtype]} weights (the numbers of the packed base, not its memory)")
            return base_dir
        from rlx.quant.export import export_compressed_tensors

        return export_compressed_tensors(policy, self.tok, Path(self._tmp) / "base_nvfp4")

    def _start(self, vllm, kwargs: dict) -> None:
        set_threads = torch.set_num_threads
        self.llm = vllm.LLM(**kwargs)
        self._SP = vllm.SamplingParams
        if not self.on_cpu:
            return
        check_whole_prefills(self.llm.llm_engine.vllm_config.scheduler_config)
        if os.environ.get("VLLM_CPU_OMP_THREADS_BIND") == "nobind":
            # vLLM's CPU worker makes torch.set_num_threads a no-op as it pins its threads; with nobind nothing
            # is pinned, so trainer.threads keeps control (docs/engine.md, "Threads and vLLM")
            torch.set_num_threads = set_threads

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
        """Trainer side: merged weights, every weight (full) or a freshly saved adapter directory."""
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
                               "took no tokenizer (rlx.rollout.vllm_setup.give_detokenizer); they would be ignored")
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
        outs = [o.outputs[0] for o in self._run(requests, params)]
        batch = sampled_batch(self.tok, ids, mask, n, [(list(c.token_ids), [lp[t].logprob for lp, t in zip(
            c.logprobs, c.token_ids)], c.finish_reason == "length") for c in outs], set(stop))
        tver = torch.full_like(batch.completion_ids, -1)  # [N, T]
        for r, c in enumerate(outs):
            for span in c.weight_versions or []:  # vLLM's record of the weights that sampled each token
                tver[r, span.start: span.end] = int(span.version)
        batch.token_version = tver
        batch.version = tver[:, 0].clone()  # versions only grow along a row: the first token's is the oldest
        return batch

    def _run(self, requests, params) -> list:
        """vLLM's engine loop one step at a time, so `between_steps` can reload weights in flight; in request order."""
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
        return [done[k] for k in sorted(done, key=int)]  # vLLM numbers requests in submission order

    def close(self) -> None:
        shutil.rmtree(getattr(self, "_tmp", ""), ignore_errors=True)
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            del llm
            import gc

            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
