"""Every config composes; choices and presets resolve; wrong overrides fail naming the valid ones."""

import copy
import functools
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate
from omegaconf import OmegaConf

CONF = Path(__file__).resolve().parents[1] / "conf"
GROUPS = ["backbone", "env_interface", "rendering", "diagnoser", "reweighting", "budget", "trainer", "logger", "split"]


def choices(group):
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def compose_with(*overrides):
    """conf/config.yaml with `overrides`, as Hydra composes it: a fresh copy each call. Composing takes
    0.3-0.6 s; the cache makes it once per process, and `make mutate`'s forked per-mutant runs inherit it."""
    return copy.deepcopy(_composed(overrides))


@functools.cache
def _composed(overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@pytest.mark.parametrize("group, choice", [(g, c) for g in GROUPS for c in choices(g)])
def test_every_group_choice_composes_and_resolves(group, choice):
    cfg = compose_with(f"{group}={choice}")
    OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)


@pytest.mark.parametrize("experiment", choices("experiment"))
def test_every_experiment_preset_composes_to_its_own_arm(experiment):
    from seal.tasks.arm import arm_of

    cfg = compose_with(f"experiment={experiment}")
    assert arm_of(cfg)[0] == experiment
    # no preset sets the label: experiment_name is the user's own
    assert cfg.experiment_name is None
    OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)


def test_the_readme_ablation_command_composes():
    cfg = compose_with("backbone=qwen2.5-3b", "reweighting=off")
    assert cfg.backbone.source == "Qwen/Qwen2.5-3B-Instruct" and cfg.reweighting.mode == "off"


def test_the_arms_differ_where_table_3_says_and_show_the_prompt_as_the_releases_configs_do():
    arms = {e: compose_with(f"experiment={e}") for e in ["vanilla_rl", "wo_env_adaptation", "wo_reweighting", "wo_closed_loop", "seal"]}
    table = {e: (c.env_interface.name, c.reweighting.mode) for e, c in arms.items()}
    assert table == {
        "vanilla_rl": ("static", "off"), "wo_env_adaptation": ("static", "closed_loop"),
        "wo_reweighting": ("schema", "off"), "wo_closed_loop": ("schema", "fixed"), "seal": ("schema", "closed_loop"),
    }
    assert compose_with("experiment=falsification").diagnoser.name == "random"
    assert compose_with("experiment=shuffled_weights").reweighting.mode == "shuffled"
    # the paper arms and their controls show the prompt as the release did; the rest keep the project's
    for name in [*arms, "falsification", "shuffled_weights"]:
        cfg = arms.get(name) or compose_with(f"experiment={name}")
        icfg = instantiate(cfg.env_interface)
        assert (cfg.rendering.tools, icfg.schema_style) == ("release", "release"), name
        assert icfg.schema_note.startswith("Observation note:")
        # the release's 20 model steps per trajectory in training; evaluation keeps BFCL's per-turn rule
        assert (cfg.budget.step_limit, cfg.budget.max_steps_per_turn, cfg.eval.step_limit) == ("episode", 20, "turn"), name
    assert compose_with("experiment=seal", "budget=paper").budget.step_limit == "episode"
    cfg = compose_with("experiment=seal_evolving")
    assert (cfg.rendering.tools, instantiate(cfg.env_interface).schema_style) == ("project", "project")
    assert (cfg.budget.step_limit, cfg.eval.step_limit) == ("turn", "turn")
    assert compose_with("experiment=seal", "rendering=project").rendering.tools == "project"


def test_paper_budget_matches_table_4_and_the_release():
    cfg = compose_with("budget=paper")
    b, t = cfg.budget, cfg.trainer
    # Table 4: 32 prompts x 8 rollouts, mini-batch 8 prompts, micro-batch 1, lr 1e-6, KL coefficient 0.001,
    # temperature 1.0, 4096 tokens, up to 20 interaction steps (per what unstated). The release's arm 04 alone:
    # 6 epochs (trainer.total_epochs), clip 0.2, grad clip 1.0
    assert (b.prompts_per_round, b.rollouts_per_prompt, b.epochs, b.max_steps_per_turn) == (32, 8, 6, 20)
    assert b.prompts_per_round // b.steps_per_round == 8 and b.micro_batch_size == 1
    assert (t.learning_rate, t.beta, t.epsilon, t.max_grad_norm) == (1e-6, 0.001, 0.2, 1.0)
    assert (b.temperature, b.eval_temperature, b.max_new_tokens) == (1.0, 0.0, 4096)


@pytest.mark.parametrize("override, named", [("backbone=qwen9", "qwen2.5-3b"), ("reweighting=sometimes", "closed_loop"),
                                             ("experiment=sael", "vanilla_rl"), ("budget=huge", "smoke")])
def test_a_wrong_choice_names_the_valid_ones(override, named):
    with pytest.raises(ConfigCompositionException) as err:
        compose_with(override)
    assert named in str(err.value)


def test_a_typo_in_a_field_fails_at_once():
    with pytest.raises(ConfigCompositionException):
        compose_with("budget.max_new_tokenz=3")


@pytest.mark.parametrize("split", choices("split"))
def test_splits_instantiate(split):
    cfg = compose_with(f"split={split}")
    assert instantiate(cfg.split).test


@pytest.mark.parametrize("choice", choices("reweighting"))
def test_reweighting_instantiates(choice):
    rw = instantiate(compose_with(f"reweighting={choice}").reweighting)
    assert rw.mode == choice


# paper Table 6 (the release's rho0 per outcome tag)
TABLE_6 = {"spurious_tool_call": 2.0, "correct_abstention": 1.8, "empty_turn_model_response": 1.5,
           "state_mismatch": 1.0, "response_mismatch": 0.9, "instance_mismatch": 0.6, "pass": 1.0}


def test_reweighting_variants_differ_from_closed_loop_only_in_mode():
    base = OmegaConf.to_container(compose_with("reweighting=closed_loop").reweighting)
    assert base["rho0"] == TABLE_6
    assert (base["w_min"], base["w_max"], base["ema_beta"], base["prevalence_alpha"]) == (0.5, 2.0, 0.25, 1.0)
    for choice in ("fixed", "shuffled", "off"):
        variant = OmegaConf.to_container(compose_with(f"reweighting={choice}").reweighting)
        assert variant == {**base, "mode": choice}, choice
    # an override of the base reaches every variant
    assert compose_with("reweighting=fixed", "reweighting.rho0.pass=1.2").reweighting.rho0["pass"] == 1.2


def test_slurm_launcher_composes_with_a_local_override():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["hydra/launcher=submitit_slurm", "hydra.launcher.partition=gpu"],
                      return_hydra_config=True)
    assert cfg.hydra.launcher._target_.endswith("SlurmLauncher") and cfg.hydra.launcher.partition == "gpu"


def test_slurm_launcher_takes_account_and_partition_from_the_local_config(tmp_path):
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "local" / "default.yaml").write_text(
        "# @package _global_\nhydra:\n  launcher:\n    account: lab42\n    partition: gpu-a100\n"
    )
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["hydra/launcher=submitit_slurm", "experiment=seal"],
                      return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.account, launcher.partition) == ("lab42", "gpu-a100")


def test_a_run_its_timeout_stopped_resumes_with_a_longer_one_in_the_same_directory():
    from seal.io import config_fingerprint

    assert compose_with().launch.timeout_minutes == 120  # two hours by default
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        dirs = [compose(config_name="config", overrides=o, return_hydra_config=True).hydra.job.override_dirname
                for o in (["seed=1"], ["seed=1", "launch.timeout_minutes=240"],
                          ["seed=1", "launch.processes=4", "launch.sharding=fsdp2"])]
    # how a job is launched is not part of its directory's name (a resubmission with other GPUs resumes)
    assert dirs == ["seed=1", "seed=1", "seed=1"]
    fingerprint = config_fingerprint(compose_with("seed=1"))
    assert config_fingerprint(compose_with("seed=1", "launch.timeout_minutes=240")) == fingerprint
    assert config_fingerprint(compose_with("seed=2")) != fingerprint


def test_a_loss_type_the_kl_term_cannot_follow_fails_with_the_fix():
    from seal.errors import UserError
    from seal.rl.config import check_hardware

    check_hardware(compose_with())  # the default setup passes
    with pytest.raises(UserError, match="loss_type"):
        check_hardware(compose_with("trainer.loss_type=dr_grpo"))


# One wrong value per group; after it, the words the one-line error must contain: the bad value and
# every valid choice (written out here by hand, from the conf files' comments and the classes that check them)
WRONG_VALUES = [
    ("backbone.dtype=float8", ["float8", "float32", "float16", "bfloat16"]),
    ("backbone.tool_format=xml", ["'xml'", "qwen_xml", "llama3_json", "bfcl_python"]),
    ("backbone.generation=sglang", ["sglang", "transformers", "vllm"]),
    ("env_interface.err=sometimes", ["env_interface", "sometimes", "off", "always", "evolve"]),
    ("rendering.schema_style=fancy", ["fancy", "project", "release"]),
    ("reweighting.mode=bogus", ["reweighting", "bogus", "off", "fixed", "closed_loop", "shuffled"]),
    ("budget.step_limit=sometimes", ["budget.step_limit", "sometimes", "turn", "episode"]),
    ("budget.rollouts_per_prompt=1", ["budget.rollouts_per_prompt=1", "at least 2"]),
    ("budget.temperature=hot", ["budget.temperature='hot'", "temperature above 0"]),
    ("trainer.loss_type=dapo", ["trainer.loss_type", "dapo", "grpo", "bnpo"]),
    # torch's AdamW refused it once the trainer was built, after the evaluation before training
    ("trainer.learning_rate=-1", ["trainer.learning_rate=-1", "positive number"]),
    # trained silently, rewarding the policy for moving off the reference
    ("trainer.beta=-0.1", ["trainer.beta=-0.1", "0 or more"]),
    ("seed=-1", ["seed=-1", "from 0 to 4294967295"]),
    ("logger.mode=bogus", ["logger.mode", "bogus", "offline", "online", "disabled"]),
    ("split.val_scenarios=-3", ["split", "val_scenarios=-3"]),
    ("launch.timeout_minutes=0", ["launch.timeout_minutes=0", "positive number of minutes"]),
]


@pytest.mark.parametrize("override, words", WRONG_VALUES, ids=[o for o, _ in WRONG_VALUES])
def test_a_wrong_value_in_any_group_stops_the_run_with_one_line_and_writes_nothing(override, words, tmp_path, capsys):
    import seal.tasks

    with pytest.raises(SystemExit) as stop:
        seal.tasks.run(compose_with(override), tmp_path)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    missing = [w for w in words if w not in err[0]]
    assert not missing, (missing, err[0])
    # refused before the run directory was claimed: the corrected command can use the same directory
    assert list(tmp_path.iterdir()) == []


def test_a_scenario_count_the_benchmark_does_not_have_is_refused():
    from seal.env.splits import scenario_disjoint

    # 200 scenarios in each category (ids multi_turn_<category>_0..199): 201 cannot be carved, 200 can (and leaves no train)
    with pytest.raises(ValueError, match="201 scenarios: between 0 and 200"):
        scenario_disjoint(test_scenarios=201)
    assert len(scenario_disjoint(test_scenarios=200).test) == 800


def test_the_paper_budget_selects_on_a_validation_part_carved_from_train():
    from seal.budget import Budget

    split = instantiate(compose_with("budget=paper").split)
    # 12 scenarios x 4 categories = 48 validation entries, all from the release's 400 train ids
    assert (len(split.val), len(split.train), len(split.test)) == (48, 352, 400)
    assert not set(split.val) & set(split.test)
    b = Budget.from_config(compose_with("budget=paper").budget)
    # 352 // 32 = 11 rounds per epoch, 6 epochs; validated every 10 rounds (the release's test_freq, which
    # counts rounds: one batch of 32 prompts, 4 optimizer updates) and after the last: 7 times
    from seal.budget import validated_after

    rounds = b.rounds_for(len(split.train))
    assert (rounds, b.val_every, b.plan.steps) == (66, 10, 4)
    assert [r + 1 for r in range(rounds) if validated_after(r, b.val_every, rounds)] == [10, 20, 30, 40, 50, 60, 66]
    # the smoke budget keeps no validation part
    assert instantiate(compose_with("budget=smoke").split).val == []


def test_a_switchs_thresholds_are_set_from_the_command_line_as_the_config_shows():
    # conf/env_interface/evolving.yaml's own example; the node was {} before, which Hydra's struct mode closed to new keys
    cfg = compose_with("env_interface.thresholds={cap/format:{on:0.2,off:0.1}}")
    interface = instantiate(cfg.env_interface)
    assert interface.thresholds == {"cap/format": {"on": 0.2, "off": 0.1}}
    assert instantiate(compose_with().env_interface).thresholds == {}
    example = next(line for line in (CONF / "env_interface" / "evolving.yaml").read_text().splitlines()
                   if "e.g. env_interface.thresholds=" in line)
    assert example.endswith('e.g. env_interface.thresholds="{cap/format: {on: 0.2, off: 0.1}}"')
