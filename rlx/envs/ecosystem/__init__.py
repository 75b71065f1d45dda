"""Environments written for other frameworks, trained by rlx (docs/envs.md, "Environments from the ecosystem").

`env=verifiers` (verifiers' classic API: `load_environment(**args) -> vf.Environment`):

    vf_load    finds and loads the environment (a module name or a path), once per process; its rows
    vf_task    VerifiersTask: the environment's dataset as rlx's prompts, its rubric as the reward
               (scored in a bounded spawn worker)
    vf_client  the model client the environment calls instead of OpenAI's: every call through rlx's
               engine, concurrent episodes' calls batched into one engine.generate per wave
    vf_engine  VerifiersEngine: engine.generate runs the environment's rollouts and returns them as one
               RolloutBatch (tokens between calls `forced`, outside the loss)
    tool_calls Hermes/Qwen `<tool_call>` JSON in a reply -> OpenAI tool calls (what vf.ToolEnv reads)

`env=trl` (a TRL-style environment class: reset, public methods as tools, get_reward):

    trl_env    loads env.factory, lists the tools and their schemas, runs an episode; TrlEngine
    trl_task   TrlTask: the task group's task, its prompts rendered with the tool schemas

Both drive their episodes through chat_engine.ChatEngine (concurrent episodes, rlx's client per episode).
Nothing here imports `verifiers` at module level: it is an optional dependency (the `envs` extra).
"""
