"""`rollout=vllm_server`: vLLM OpenAI-compatible servers as the rollout engine (pool: processes, keys,
routing; engine: token-id sampling, adapter-only sync, the sync canary)."""
