"""Every sweep file (every job of it) and every paper-scale experiment composes and validates."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rlx.config import register_configs
from tests.conftest import compose
from rlx.sweeps.spec import arm_axis, arm_settings
from tests.sweeps.sweep_helpers import EXPERIMENTS, SWEEP_NAMES, compose_sweep, composed_job, sweep_axes, sweep_jobs

register_configs()  # the schema every config composes onto

PATHS = ["model.path=/models/m", "task.train_path=/data/train.jsonl", "task.eval_path=/data/eval.jsonl"]


def validate(cfg) -> None:
    """What rlx.train checks before it builds a model: schema (at compose), no missing value, each part's own check."""
    from rlx import algo as A
    from rlx.extrapolation import build_extrapolator
    from rlx.noise import build_noise
    from rlx.quant.formats import get_format
    from rlx.scaling.config import as_config
    from rlx.tasks import REWARDS

    OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    A.check_config(cfg.algo)
    build_noise(cfg.noise, cfg.train.steps, cfg.seed)
    build_extrapolator(cfg.extrapolation, cfg.train.steps)
    as_config(cfg.scaling)
    if cfg.quant.format != "none":
        get_format(cfg.quant.format)
    assert set(cfg.task.rewards) <= set(REWARDS), cfg.task.rewards
    assert cfg.model.source in ("tiny", "hf", "gguf")


def test_the_five_paper_tables_have_a_sweep_file():
    assert SWEEP_NAMES == ["mini_next", "mini_qerl", "mini_scalerl", "next_table", "qerl_speed", "qerl_table1",
                           "scalerl_loo", "scalerl_losses", "scalerl_offpolicy", "smollm2_next", "smollm2_qerl",
                           "smollm2_qerl_tuned", "smollm2_scalerl", "smollm2_tune", "smollm2_wordproblems"]


TUNING = {"smollm2_tune": "smollm2_wordproblems"}  # a tuning sweep -> the sweep that runs its choice on 3 seeds


@pytest.mark.parametrize("name", SWEEP_NAMES)
def test_every_job_of_every_sweep_composes_and_validates(name):
    cfg = compose_sweep(name, hydra=True)
    assert cfg.logger.group == name  # wandb runs grouped by the sweep's name
    assert cfg.hydra.sweep.dir.startswith(f"outputs/sweeps/{name}/")
    if name in TUNING:  # one seed an arm by design: the chosen arm gets its seeds in another sweep
        assert len(sweep_jobs(name, all_seeds=True)) >= 2 and len(sweep_jobs(TUNING[name], all_seeds=True)) >= 3
    else:
        assert len(sweep_jobs(name, all_seeds=True)) >= 3  # at least 3 seeds (of each arm)
    for job in sweep_jobs(name):  # every arm (the seed axis only reseeds)
        validate(composed_job(name, tuple(job)))


@pytest.mark.parametrize("launcher,target", [("joblib", "JoblibLauncher"), ("submitit_slurm", "SlurmLauncher")])
def test_sweeps_compose_with_the_launchers(launcher, target):
    cfg = compose_sweep("scalerl_loo", [f"hydra/launcher={launcher}"], hydra=True)
    assert cfg.hydra.launcher._target_.endswith(target)
    assert cfg.hydra.sweeper.params.loo_arm.startswith("scalerl,")  # the sweep's axes survive


def test_distributed_slurm_launcher_runs_one_task_per_gpu():
    cfg = compose_sweep("scalerl_loo", ["hydra/launcher=submitit_slurm_ddp", "hydra.launcher.nodes=2"], hydra=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert launcher.tasks_per_node == launcher.gpus_per_node == 8 and launcher.nodes == 2
    assert launcher.timeout_min == 1440  # the rest comes from submitit_slurm


def _jobs(name: str):
    return [(job, composed_job(name, tuple(job))) for job in sweep_jobs(name)]


def test_qerl_table1_arms_are_the_papers_columns():
    cols = {(c.quant.format, c.noise.type, c.train.steps > 0) for _, c in _jobs("qerl_table1")}
    formats = {"none", "nf4", "mxfp4", "nvfp4"}
    expected = {(f, "none", False) for f in formats} | {(f, "none", True) for f in formats} | {("nvfp4", "aqn", True)}
    assert cols == expected
    assert set(sweep_axes("qerl_table1")["seed"]) == {"0", "1", "2"}
    for _, c in _jobs("qerl_table1"):
        assert c.algo.name == "grpo"
        if c.quant.format == "nf4":
            assert c.quant.double_quant  # QLoRA
        if c.noise.type == "aqn":  # QeRL Table 4 schedule
            assert (c.noise.sigma_start, c.noise.sigma_end, c.noise.stages) == (1e-2, 5e-4, 10)


def test_smollm2_qerl_is_qerls_three_arms_on_the_tuned_recipe_in_fp32_on_vllm():
    tuned = compose(["experiment=smollm2_wordproblems"])
    cols = set()
    for _, c in _jobs("smollm2_qerl"):
        cols.add((c.quant.format, c.noise.type))
        assert c.rollout == tuned.rollout and c.model.source == "gguf"
        # fp32 everywhere; a packed base reaches vLLM's CPU build merged (its dequantized values)
        assert c.trainer.dtype == "fp32" and c.rollout.engine == "vllm" and c.rollout.vllm.sync == "auto"
        assert c.algo == tuned.algo  # the recipe as tuned, whatever the arm
        # the same training; only when it evaluates and checkpoints is the sweep's own (bookkeeping)
        differ = {k for k in tuned.train if c.train[k] != tuned.train[k]}
        assert differ == {"eval_every", "ckpt_every"} and c.train.steps == tuned.train.steps
        if c.noise.type == "aqn":
            assert (c.noise.sigma_start, c.noise.sigma_end, c.noise.stages) == (1e-2, 5e-4, 10)
    assert cols == {("none", "none"), ("nvfp4", "none"), ("nvfp4", "aqn")}
    assert set(sweep_axes("smollm2_qerl")["seed"]) == {"0", "1", "2"}


def _arm(job: list[str], key: str) -> str:
    return dict(o.split("=", 1) for o in job)[key]


def test_smollm2_qerl_tuned_gives_each_arm_its_own_lr_grid_on_the_tuned_recipe():
    tuned = compose(["experiment=smollm2_wordproblems"])
    sixteen = tuned.algo.lr
    assert sixteen == 3e-4  # the lr sweeps/smollm2_tune.yaml chose on the 16-bit base
    grids: dict = {}
    for job, c in _jobs("smollm2_qerl_tuned"):
        arm = (c.quant.format, c.noise.type)
        grids.setdefault(arm, set()).add(c.algo.lr)
        assert float(_arm(job, "qerl_tuned_arm").rsplit("_lr", 1)[1]) == c.algo.lr  # the file's name says its lr
        assert c.rollout == tuned.rollout and c.model == tuned.model and c.task == tuned.task
        assert {k: v for k, v in c.algo.items() if k != "lr"} == {k: v for k, v in tuned.algo.items() if k != "lr"}
        assert c.trainer.dtype == "fp32" and c.rollout.engine == "vllm" and c.train.steps == tuned.train.steps == 100
        assert c.quant.double_quant == (c.quant.format == "nf4")  # QLoRA's double quantization
        if c.noise.type == "aqn":  # QeRL's scripts: 1e-2 -> 1e-4 over 10 stages, the first noise-free
            assert (c.noise.schedule, c.noise.sigma_start, c.noise.sigma_end, c.noise.stages) == (
                "exponential", 1e-2, 1e-4, 10)
    assert grids == {("none", "none"): {1.5e-4, 3e-4, 6e-4},  # x0.5, x1, x2 the tuned lr
                     ("nvfp4", "none"): {3e-4, 6e-4, 1.2e-3},  # x1, x2 (QeRL's ratio), x4
                     ("nvfp4", "aqn"): {3e-4, 6e-4, 1.2e-3},
                     ("nf4", "none"): {3e-4, 6e-4, 1.2e-3}}
    for arm, lrs in grids.items():
        assert len(lrs) >= 3 and (arm == ("none", "none") or 2 * sixteen in lrs)
    assert sweep_axes("smollm2_qerl_tuned")["seed"] == ["0"]  # stage 1; stage 2's seeds come on its command line
    key, arms = arm_axis("smollm2_qerl_tuned")
    assert set(arms) == set(arm_settings(key))  # every arm file is swept, every swept arm has a file


def test_aqn_schedule_of_the_tuned_sweep_by_hand():
    from rlx.noise.schedules import sigma_at

    job = next(j for j, c in _jobs("smollm2_qerl_tuned") if c.noise.type == "aqn")
    cfg = composed_job("smollm2_qerl_tuned", tuple(job))
    steps = cfg.train.steps  # 100 steps, 10 stages of 10 steps; stage k >= 1: 1e-2 * (1e-4 / 1e-2) ** ((k - 1) / 8)
    sigma = [sigma_at(s, steps, cfg.noise)[0] for s in range(steps)]
    assert sigma[:10] == [0.0] * 10  # stage 0 noise-free
    assert sigma[10:20] == [1e-2] * 10  # stage 1: sigma_start
    assert sigma[30] == pytest.approx(1e-2 * 10 ** -0.5)  # stage 3: (3 - 1) / 8 of the way in log -> 3.162e-3
    assert sigma[50] == pytest.approx(1e-3)  # stage 5: half way in log
    assert sigma[90:] == [1e-4] * 10  # stage 9: sigma_end


def test_smollm2_next_is_plain_lora_at_n_and_1_6n_against_next_at_n_with_alpha_swept():
    tuned = compose(["experiment=smollm2_wordproblems"])
    arms = {_arm(job, "smollm2_next_arm"): c for job, c in _jobs("smollm2_next")}
    n = arms["none_n"].train.steps
    assert n == 50 and arms["none_long"].train.steps == round(1.6 * n) == 80
    assert {a: (c.extrapolation.type, c.train.steps) for a, c in arms.items()} == {
        "none_n": ("none", n), "none_long": ("none", 80), "next": ("next", n), "next_alpha0.5": ("next", n),
        "next_alpha2.5": ("next", n)}
    assert {a: c.extrapolation.alpha for a, c in arms.items() if a.startswith("next")} == {
        "next": 1.5, "next_alpha0.5": 0.5, "next_alpha2.5": 2.5}  # the paper's 1.5 and its stable range's ends
    for arm, c in arms.items():
        # the task, verifier and recipe of experiment=smollm2_wordproblems; fp32 so a resume may change machines
        assert c.rollout == tuned.rollout and c.task == tuned.task and c.algo == tuned.algo and c.model == tuned.model
        assert c.trainer.dtype == "fp32" and c.train.eval_every == 10
        if c.extrapolation.type == "next":
            x = c.extrapolation
            assert list(x.extend_at) == [round(0.6 * n)]  # the paper's jump at 150 of 250
            assert x.interval / n == pytest.approx(10 / 250) and x.horizon / n == pytest.approx(50 / 250)
            assert (x.hidden, x.epochs, x.min_lr_ratio, x.reset_optimizer) == (256, 1000, 0.1, True)
    assert sweep_axes("smollm2_next")["seed"] == ["0", "1", "2"]
    key, names = arm_axis("smollm2_next")
    assert set(names) == set(arm_settings(key))


@pytest.mark.parametrize("name,key", [("smollm2_qerl_tuned", "qerl_tuned_arm"), ("smollm2_next", "smollm2_next_arm")])
def test_issue_44_sweeps_resume_in_a_fixed_directory_per_arm_and_seed(name, key):
    from rlx.sweeps.spec import sweep_dir_of

    cfg = compose_sweep(name, hydra=True)
    assert "${" not in cfg.hydra.sweep.dir  # no timestamp: the same command finds the same jobs
    assert sweep_dir_of(name, []) == (cfg.hydra.sweep.dir, [f"hydra.sweep.dir={cfg.hydra.sweep.dir}"])
    assert OmegaConf.to_container(cfg.hydra.sweep)["subdir"] == f"${{hydra.runtime.choices.{key}}}_seed${{seed}}"


def test_qerl_speed_covers_every_format_at_batch_2_and_8():
    got = {(c.quant.format, c.rollout.prompts_per_step * c.rollout.group_size) for _, c in _jobs("qerl_speed")}
    assert got == {(f, b) for f in ("none", "nf4", "mxfp4", "nvfp4") for b in (2, 8)}


def test_next_table_arms_none_at_n_and_1_6n_and_jumps_before_n():
    arms = {}
    for job, c in _jobs("next_table"):
        arms[dict(o.split("=") for o in job)["next_arm"]] = c
    n = arms["none_n"].train.steps
    assert arms["none_long"].train.steps == round(1.6 * n)
    assert {a: c.extrapolation.type for a, c in arms.items()} == {
        "none_n": "none", "none_long": "none", "linear": "linear", "next": "next"}
    for arm in ("linear", "next"):
        c = arms[arm]
        assert c.train.steps == n
        assert list(c.extrapolation.extend_at) == [round(0.6 * n)]  # the paper's jump at 150 of 250
        assert c.extrapolation.alpha == 1.5
    nxt = arms["next"].extrapolation
    assert nxt.horizon / n == pytest.approx(50 / 250) and nxt.interval / n == pytest.approx(10 / 250)


def test_scalerl_losses_compares_the_five_losses_with_sigmoid_fits():
    cfgs = [c for _, c in _jobs("scalerl_losses")]
    assert {c.algo.name for c in cfgs} == {"grpo", "dapo", "cispo", "gspo", "scalerl"}
    assert {c.algo.loss for c in cfgs} == {"ppo_clip", "cispo", "gspo"}
    for c in cfgs:
        assert c.scaling.fit == "sigmoid" and c.scaling.metric == "val/mean_at_k"
        assert c.train.steps // c.train.eval_every >= 2 * c.scaling.min_points  # enough points to fit


# each leave-one-out arm must differ from the full recipe in exactly its component (ScaleRL section 4)
LOO_COMPONENT = {
    "loss_ppo_clip": {"loss": "ppo_clip", "eps_high": 0.28},
    "agg_sample": {"aggregation": "sample"},
    "adv_group": {"adv_norm": "group"},
    "no_zero_var_filter": {"zero_variance_filter": False},
    "no_pos_resampling": {"no_positive_resampling": False},
    "no_fp32_head": {"fp32_lm_head": False},
    "no_interruption": {"interrupt.enabled": False},
    "on_policy": {"mode": "sync", "max_staleness": 0},
}


def _recipe(c) -> dict:
    """The algo keys, plus the generation side of the recipe (rollout mode, staleness, interruption)."""
    out = OmegaConf.to_container(c.algo)
    out.update({"mode": c.rollout.mode, "max_staleness": c.rollout.max_staleness,
                "interrupt.enabled": c.rollout.interrupt.enabled})
    return out


def test_scalerl_loo_reverts_exactly_one_component_per_arm():
    algos = {}
    for job, c in _jobs("scalerl_loo"):
        algos[dict(o.split("=") for o in job)["loo_arm"]] = _recipe(c)
    full = algos.pop("scalerl")
    assert (full["loss"], full["aggregation"], full["adv_norm"]) == ("cispo", "prompt", "batch")
    assert full["zero_variance_filter"] and full["no_positive_resampling"] and full["fp32_lm_head"]
    assert (full["mode"], full["max_staleness"], full["interrupt.enabled"]) == ("stale", 8, True)  # PipelineRL-8 stand-in
    assert set(algos) == set(LOO_COMPONENT)
    for arm, algo in algos.items():
        diff = {k: v for k, v in algo.items() if full[k] != v}
        assert diff == LOO_COMPONENT[arm], arm


def test_scalerl_losses_compares_on_off_policy_data():
    for _, c in _jobs("scalerl_losses"):
        assert (c.rollout.mode, c.rollout.max_staleness) == ("stale", 8)


def test_scalerl_offpolicy_is_pipeline_k_vs_ppo_k():
    arms = {dict(o.split("=") for o in job)["offpolicy_arm"]: _recipe(c) for job, c in _jobs("scalerl_offpolicy")}
    assert {a: (r["mode"], r["max_staleness"], r["mu"]) for a, r in arms.items()} == {
        "pipeline_8": ("stale", 8, 1), "ppo_8": ("sync", 0, 8), "on_policy": ("sync", 0, 1)}
    base = {k: v for k, v in arms["pipeline_8"].items() if k not in ("mode", "max_staleness", "mu")}
    for r in arms.values():  # the rest of the ScaleRL recipe is the same in every arm
        assert {k: v for k, v in r.items() if k not in ("mode", "max_staleness", "mu")} == base


RUN_HERE = ["mini_next", "mini_qerl", "mini_scalerl", "scalerl", "smollm2_gsm8k", "smollm2_wordproblems"]  # sized to this CPU
PAPER_SCALE = [e for e in EXPERIMENTS if e not in RUN_HERE]


def test_experiments_exist():
    assert EXPERIMENTS == ["mini_next", "mini_qerl", "mini_scalerl", "next_qwen2.5_7b", "qerl_gsm8k_7b", "scalerl",
                           "scalerl_8b", "smollm2_gsm8k", "smollm2_wordproblems"]


def test_smollm2_experiment_is_the_pretrained_model_on_word_problems_with_vllm():
    cfg = compose(["experiment=smollm2_wordproblems"])
    validate(cfg)  # no paths: the model comes from the pip wheel's GGUF, the task is generated
    assert (cfg.model.source, cfg.task.name, cfg.rollout.engine) == ("gguf", "wordproblems", "vllm")
    assert cfg.model.chat_prompts and cfg.task.rewards == {"stated_answer": 1.0}
    # 4 x 4 = 16 sequences per step, forwarded 4 at a time, on the lean path (docs/lean.md)
    assert cfg.rollout.prompts_per_step * cfg.rollout.group_size == 16 and cfg.algo.micro_batch_size == 4
    assert cfg.algo.shared_prefix and cfg.trainer.dtype == "auto"
    assert cfg.algo.name == "cispo"  # GRPO at these settings learned on 2 of 3 seeds, CISPO on 3 (docs/results.md)
    # tuned by sweeps/smollm2_tune.yaml (docs/results.md); not the algo group's 1e-3, which broke 3 of 5 runs
    assert cfg.algo.lr == 3e-4 and cfg.rollout.temperature == 0.7 and cfg.train.steps == 100
    assert compose(["experiment=smollm2_wordproblems", "algo=cispo"]).algo.lr == 3e-4  # in every algo arm
    assert compose(["experiment=smollm2_wordproblems", "rollout=hf"]).rollout.engine == "hf"


@pytest.mark.parametrize("name", ["mini_next", "mini_qerl", "mini_scalerl"])
def test_mini_testbeds_run_here_on_the_rules_task(name):
    cfg = compose([f"experiment={name}"])
    validate(cfg)  # no paths to supply: the tiny model and the synthetic task
    assert cfg.model.source == "tiny" and cfg.task.name == "rules" and cfg.model.sft.steps == 1500
    assert cfg.algo.beta == 0.04 and cfg.algo.lr == 1e-3
    # ScaleRL's testbed: a demonstrator right half the time (a smooth, fittable climb); the others: 2% (rare)
    assert cfg.task.demo_correct == (0.5 if name == "mini_scalerl" else 0.02)
    assert compose([f"experiment={name}", "algo=cispo"]).algo.beta == 0.04  # the testbed's KL in every arm


@pytest.mark.parametrize("name", PAPER_SCALE)
def test_experiment_composes_validates_and_needs_only_paths(name):
    bare = compose([f"experiment={name}"])
    # the user supplies the model and data paths (`???` in the file; unset after merging onto the schema)
    for key in ("model.path", "task.train_path", "task.eval_path"):
        assert OmegaConf.select(bare, key, default=None) in (None, "???"), key
    cfg = compose([f"experiment={name}", *PATHS])
    validate(cfg)
    assert cfg.model.source == "hf" and cfg.model.dtype == "bfloat16" and cfg.task.name == "file"
    assert cfg.logger.group == name


def test_qerl_experiment_has_the_papers_recipe():
    c = compose(["experiment=qerl_gsm8k_7b", *PATHS])  # PAPERS.md: QeRL Table 4
    assert (c.quant.format, c.noise.type, c.algo.loss) == ("nvfp4", "aqn", "ppo_clip")
    assert c.rollout.group_size == 8 and c.rollout.group_size * c.rollout.prompts_per_step == 128
    assert (c.model.lora.r, c.model.lora.alpha) == (32, 32) and c.algo.lr == 1e-5
    assert (c.algo.eps_low, c.algo.eps_high, c.algo.beta) == (0.2, 0.28, 0.0)
    assert (c.noise.sigma_start, c.noise.sigma_end, c.noise.stages) == (1e-2, 5e-4, 10)
    assert c.rollout.temperature == 1.0


def test_next_experiment_has_the_papers_recipe():
    c = compose(["experiment=next_qwen2.5_7b", *PATHS])  # PAPERS.md: NExt
    e = c.extrapolation
    assert (e.type, e.interval, e.horizon, list(e.extend_at), e.alpha) == ("next", 10, 50, [150], 1.5)
    assert (e.hidden, e.epochs) == (256, 1000)
    assert c.train.steps == 250 and (c.model.lora.r, c.model.lora.alpha) == (64, 32) and c.algo.lr == 5e-6
    assert c.rollout.group_size == 8 and c.rollout.temperature == 1.0


def test_scalerl_experiment_has_the_papers_recipe():
    c = compose(["experiment=scalerl_8b", *PATHS])  # PAPERS.md: ScaleRL
    assert (c.rollout.mode, c.rollout.max_staleness, c.rollout.interrupt.enabled) == ("async", 8, True)
    assert c.rollout.engine == "vllm"
    a = c.algo
    assert (a.loss, a.aggregation, a.adv_norm, a.beta) == ("cispo", "prompt", "batch", 0.0)
    assert a.zero_variance_filter and a.no_positive_resampling and a.fp32_lm_head and a.pass_rate_threshold == 0.9
    assert c.rollout.group_size == 16 and c.rollout.eval_k == 16 and c.task.n_eval == 1000
    s = c.scaling
    assert (s.fit, s.compute, s.metric, s.exclude_before, s.fit_fraction) == (
        "sigmoid", "gpu_hours", "val/mean_at_k", 1500, 0.5)
