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
