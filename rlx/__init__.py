"""rlx: RL with verifiable rewards for LLMs (QeRL, NExt, ScaleRL) as one Hydra app; see README.md."""
