"""What one small training run leaves behind, as a newcomer meets it: the arm it is filed under (run_config.json,
metrics.json, W&B), labelled progress bars, the report's title, the checkpoint folder's model card, and the
notebook's plot (budget=tiny, backbone=tiny-random, an ablation of the default arm)."""

import json

from seal.report import wandb_run
from seal.report.inspect_run import main as inspect_run
from seal.tasks import run
from tests.config_values import backbone_cfg
from tests.test_configs import compose_with

ARM = "seal_evolving+reweighting=off"


def test_an_ablation_run_is_filed_under_its_arm_and_leaves_readable_outputs(tmp_path, monkeypatch, capsys):
    seen = {}

    class Recording(wandb_run.WandbRun):
        def __init__(self, **kwargs):
            seen.update(kwargs)
            super().__init__(**kwargs)

    monkeypatch.setattr(wandb_run, "WandbRun", Recording)
    cfg = compose_with("backbone=tiny-random", "budget=tiny", "reweighting=off", "logger.mode=disabled",
                       "budget.ood_benchmarks=[bfcl_single_turn]", "benchmark=bfcl_single_turn",
                       "benchmark.categories=[simple_python]")
    run(cfg, tmp_path)
    choices = {"env_interface": "evolving", "diagnoser": "rules", "reweighting": "off", "rendering": "project",
               "protocol": "bfcl", "budget.step_limit": "turn", "budget.max_train_tokens": None}
    config = json.loads((tmp_path / "run_config.json").read_text())
    assert (config["arm"], config["arm_choices"], config["experiment_name"]) == (ARM, choices, ARM)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert (metrics["arm"], metrics["arm_choices"]) == (ARM, choices)
    # W&B: the arm is the job type, the name is short, the config is run_config.json's
    assert (seen["job_type"], seen["name"]) == (ARM, f"{ARM} | tiny-random | seed 0")
    assert seen["config"]["arm_choices"] == choices

    # a bar per protocol for the held-out evaluations, a bar per category of an out-of-domain benchmark
    err = capsys.readouterr().err.replace("\r", "\n")
    for label in ("eval before · bfcl", "eval before · release", "eval after · bfcl", "eval after · release"):
        assert f"{label}: 100%|" in err, label
    for when in ("before", "after"):
        assert f"ood {when} · bfcl_single_turn · simple_python: 100%|" in err

    report = (tmp_path / "report.md").read_text()
    assert report.startswith(f"# SEAL training run: {ARM} | tiny-random | seed 0\n")
    # TRL's model card names the base model (a local weights folder would read "[None]")
    card = (tmp_path / "checkpoints" / "README.md").read_text()
    assert "fine-tuned version of [tiny-random]" in card and "[None]" not in card

    # the notebook, run from the command line, saves its plot beside the run
    inspect_run([str(tmp_path)])
    notebook = json.loads((tmp_path / "inspect_run.ipynb").read_text())
    outputs = [o for c in notebook["cells"] if c["cell_type"] == "code" for o in c["outputs"]]
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert f"| {ARM} | tiny-random | 2 rounds" in "".join("".join(o.get("text", "")) for o in outputs)


def test_a_model_card_names_the_hub_checkpoint_behind_the_weights():
    from hydra.utils import instantiate

    # the embedded SmolLM2 is a GGUF copy of the hub's instruct model; a hub backbone is its hub id
    assert instantiate(backbone_cfg("smollm2-135m")).base_model_id == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert instantiate(backbone_cfg("qwen2.5-3b")).base_model_id == "Qwen/Qwen2.5-3B-Instruct"
