"""`rollout=vllm_server`: vLLM OpenAI-compatible servers (pool: processes, keys, routing; engine: sampling, sync)."""
