"""Model selection on a validation part carved from train, never on test.

Every `budget.val_every` rounds, and after the last round, the current model is evaluated (greedy,
plain interface) on the validation part, as the authors' trainer validated every `test_freq` rounds and
at its last; the best one so far is kept in `best_model/` (`best.json` says which round and why).
Before training the initial model, and after it the best-on-validation model and the final model, are
evaluated on the test part, and reports show all three. The authors' release instead validated on the test set and kept the best
checkpoint by it; `eval_all_checkpoints_on_test=true` reproduces that optimism as a diagnostic only:
every validated model is kept in `validated/` and scored on test after training, and the best of those
test scores is reported in a column marked test-selected, never used for a claim.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from seal.budget import validated_after
from seal.errors import UserError
from seal.rl.checkpoint import save_final_model

AVG = "eval/bfcl_v3/avg"
# the selection metric when eval.protocols plays the release protocol alone
RELEASE_AVG = "eval/bfcl_v3_release/avg"


class ModelSelection:
    def __init__(self, *, every: int | None, val_entries: list[Any], out_dir: Path, dist: Any,
                 keep_all: bool = False, evaluate: Any, dtype: str | None = None, rounds: int | None = None):
        if every is not None and int(every) < 1:
            raise UserError(f"budget.val_every={every}: give a number of rounds (at least 1) or null")
        if every is not None and not val_entries:
            raise UserError("budget.val_every needs a validation part carved from train: set split.val_scenarios=<n> "
                            "(model selection never touches test)")
        if keep_all and every is None:
            raise UserError("eval_all_checkpoints_on_test=true scores the validated models: set budget.val_every too")
        self.every = None if every is None else int(every)
        # the planned number of rounds: the last is validated too (None: only every `every`-th)
        self.rounds = rounds
        self.val_entries, self.out_dir, self.dist = val_entries, out_dir, dist
        self.keep_all, self.evaluate = keep_all, evaluate
        # kept models are written in the backbone's dtype, as the final one (None: the weights' own)
        self.dtype = dtype
        self.best_path = out_dir / "best.json"
        self.best = json.loads(self.best_path.read_text()) if self.best_path.exists() else None
        # seconds the latest model write took (None: none yet)
        self.model_save_seconds: float | None = None

    @property
    def active(self) -> bool:
        return self.every is not None

    def after_round(self, record: Any, model: Any) -> None:
        """Validate after every `every`-th round and the last; keep the model when it is the best so far."""
        if not self.active or not validated_after(record.round, self.every, self.rounds):
            return
        started = time.perf_counter()
        metrics, _ = self.evaluate(self.val_entries, self.out_dir / "val" / f"round_{record.round:04d}")
        # the round's split (seal.report.clock.round_seconds) counts its validation and the models it keeps
        record.metrics["time/validation"] = time.perf_counter() - started
        key = AVG if AVG in metrics else RELEASE_AVG
        score = metrics[key]
        record.metrics["val" + key.removeprefix("eval")] = score
        saves = []
        # ties keep the earlier model: a later one has to be better, not equal
        if self.best is None or score > self.best["score"]:
            self.best = {"round": record.round, "global_step": record.global_step, "score": score,
                         "metric": f"val {key}", "entries": len(self.val_entries)}
            saves.append(self._keep(model, self.out_dir / "best_model"))
            if self.dist.main:
                self.best_path.write_text(json.dumps(self.best, indent=2))
        if self.keep_all:
            saves.append(self._keep(model, self.out_dir / "validated" / f"round_{record.round:04d}"))
        if saves:
            record.metrics["time/model_save"] = sum(saves)

    def _keep(self, model: Any, folder: Path) -> float:
        """Write the model to `folder` in the backbone's dtype; the seconds it took (also kept as
        `model_save_seconds`: the job's clock times the final model's write by it). Every rank holds the same
        gathered metrics, so every rank takes the same decision: saving gathers a sharded model collectively, and
        the main rank alone writes."""
        started = time.perf_counter()
        save_final_model(model, folder, self.dtype, write=self.dist.main)
        self.model_save_seconds = time.perf_counter() - started
        return self.model_save_seconds

    def test_initial(self, test_entries: list[Any]) -> dict[str, Any]:
        """The initial model on test (the tables' base-model row: the before-evaluation is on the validation
        part), once: a resumed run reads it back from eval_test_before.json."""
        if not self.active:
            return {}
        path = self.out_dir / "eval_test_before.json"
        if path.exists():
            return {"test_before": json.loads(path.read_text())}
        metrics, _ = self.evaluate(test_entries, self.out_dir / "eval_test_before")
        if self.dist.main:
            path.write_text(json.dumps(metrics, indent=2))
        return {"test_before": metrics}

    def test_evaluations(self, model: Any, test_entries: list[Any]) -> dict[str, Any]:
        """The final and the best-on-validation models on test (and, as a diagnostic, every validated one)."""
        if not self.active:
            return {}
        out: dict[str, Any] = {}
        out["test_final"], _ = self.evaluate(test_entries, self.out_dir / "eval_test_final")
        # the final weights are in final_model/ already; the model is loaded over from here on
        if self.best is not None:
            _load(model, self.out_dir / "best_model")
            out["test_best_on_val"], _ = self.evaluate(test_entries, self.out_dir / "eval_test_best")
            out["test_best_on_val"]["selected"] = self.best
        if self.keep_all:
            scores, key = {}, AVG
            for folder in sorted((self.out_dir / "validated").glob("round_*")):
                _load(model, folder)
                metrics, _ = self.evaluate(test_entries, None)
                key = AVG if AVG in metrics else RELEASE_AVG
                scores[folder.name] = metrics[key]
            best = max(scores, key=scores.get)
            # the score under the key of the protocol that produced it
            out["test_selected_diagnostic"] = {
                "note": "selected on TEST, as the authors' release did: optimistic, never use for a claim",
                "by_round": scores, "round": best, key: scores[best]}
        return out


def _unwrapped(model: Any) -> Any:
    return getattr(model, "module", model)


def _load(model: Any, folder: Path) -> None:
    from safetensors.torch import load_file

    state = {}
    for shard in sorted(folder.glob("*.safetensors")):
        state.update(load_file(shard))
    from seal.rl.sharding import require_plain

    target = _unwrapped(model)
    require_plain(target, f"loading {folder}")
    if hasattr(target, "get_base_model") and (folder / "adapter_config.json").exists():
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(target, state)
        return
    missing, unexpected = target.load_state_dict(state, strict=False)
    # tied embeddings are saved once: only the tied head may be missing
    if unexpected or any("lm_head" not in k for k in missing):
        raise RuntimeError(f"{folder} does not match the model (missing {missing[:3]}, unexpected {unexpected[:3]})")
