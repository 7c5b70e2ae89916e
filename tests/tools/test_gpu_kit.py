"""The GPU kit's stand-in for the embedded model: what a borrowed GPU machine loads instead of the 98 MB GGUF."""

import hashlib
import sys

from tests.tools.gpu_kit import STAND_IN, TOKENIZER_FILES, write_stand_in


def test_the_stand_in_gives_the_embedded_tokenizer_without_its_weights(tmp_path, monkeypatch):
    from seal.policy import backbones

    real = backbones.embedded_tokenizer()
    write_stand_in(tmp_path)
    # as run.sh sets them on the GPU machine: the stand-in package first on the path, seal's cache in the kit
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site"), *sys.path])
    monkeypatch.delitem(sys.modules, backbones.EMBEDDED_PACKAGE, raising=False)
    monkeypatch.setenv("SEAL_CACHE", str(tmp_path / "cache"))
    assert backbones._package_dir(backbones.EMBEDDED_PACKAGE) == tmp_path / "site" / backbones.EMBEDDED_PACKAGE
    found = backbones.embedded_model_dir()
    # the kit's folder, named by the first 12 hex digits of the stand-in file's sha256: nothing was converted
    assert found == tmp_path / "cache" / "models" / f"smollm2-135m-{hashlib.sha256(STAND_IN).hexdigest()[:12]}"
    assert sorted(p.name for p in found.iterdir()) == sorted(TOKENIZER_FILES)
    stand_in = backbones.embedded_tokenizer()
    text = "<|im_start|>user\nmkdir(dir_name='temp')<|im_end|>"
    assert stand_in(text)["input_ids"] == real(text)["input_ids"] and len(stand_in) == len(real) == 49152
    assert stand_in.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == \
        real.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)


def test_run_sh_collect_brings_back_what_recomputes_the_runs_figures(tmp_path):
    import subprocess
    import tarfile
    from pathlib import Path

    work, out = tmp_path / "work", tmp_path / "out"
    written = ["gpu_check.txt", "gc/gpu_check.json", "gc/logs/train.peak.json", "gc/sanity/sanity.json",
               "gc/sanity/logprobs/step00001_rank0_000.pt", "gc/train/metrics.jsonl", "gc/train/run_config.json",
               "gc/train/logprobs/step00001_rank0_000.pt",
               # not brought back: the weights (tens of GiB on the 3B shape) and the evaluations' trajectories
               "gc/models/published-x/model.safetensors", "gc/train/checkpoints/checkpoint-4/seal_state.json",
               "gc/train/eval_before.json"]
    for name in written:
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(name)
    script = Path(__file__).with_name("gpu_kit_run.sh")
    # a preflight stopped before its report: the device command collects again after `timeout`
    proc = subprocess.run(["bash", str(script), "--collect"], env={"PATH": "/usr/bin:/bin", "WORK": str(work),
                                                                     "OUT": str(out)}, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["gpu_check.json", "gpu_check.txt", "nvidia-smi.txt", "runs.tar.gz"]
    with tarfile.open(out / "runs.tar.gz") as tar:
        files = sorted(m.name for m in tar.getmembers() if m.isfile())
    assert files == sorted(written[2:8])
