"""Benchmarks that print ratios (quant, rollout, vs_trl, vllm_sync, offpolicy, gpu) and study scripts (studies/)."""
