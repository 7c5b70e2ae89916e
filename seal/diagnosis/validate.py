"""task=validate_diagnoser: measure a diagnoser against known, injected failures, in both layers.

Each case starts from an entry's gold trajectory, injects one failure of a known kind (into the
target turn, or into an earlier turn for the inherited-state recipes), plays the result through the
real Episode protocol and the official verification, and keeps the case only when the injection did
what it intends (e.g. a "wrong value" injection that the backend rejected is not a clean
value_mismatch). The diagnoser then labels every trajectory; the target turn's (outcome, cause) is
compared with the true pair, and so is every turn after an early end (the release's tags there,
cause not_played). Confusion matrices and F1 are reported per layer.

Acceptance uses the executor's and the checker's outcome (did the call error, did the turn fail,
was it the state or the results) to confirm the injection; it never consults the diagnoser.
"""

from __future__ import annotations

import logging
import random
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from seal.diagnosis import labels as L
from seal.diagnosis.injections import RECIPES, Case, after_end, play
from seal.env.benchmarks.bfcl_v3 import CATEGORIES, load_benchmark
from seal.env.verifier import verify

log = logging.getLogger(__name__)

# Validation size: entries drawn per category (each gets every applicable recipe once)
ENTRIES_PER_CATEGORY = 40
# A recipe whose injection the checker does not confirm is redrawn (new spot, new value) this often
ATTEMPTS = 4
GOAL_MACRO_F1 = 0.95
GOAL_MIN_RECALL = 0.9
# how a None cause (a turn that needs none) appears in the tables
NO_CAUSE = "none"
VOCABULARY = {"outcome": L.OUTCOMES, "cause": L.CAUSES + (NO_CAUSE,)}


def layer_value(label: L.TurnLabel, layer: str) -> str:
    value = label.outcome if layer == "outcome" else label.cause
    return NO_CAUSE if value is None else value


def build_cases(
    seed: int, entries_per_category: int | None = None, rejected: list[Case] | None = None
) -> tuple[list[Case], dict[str, Counter]]:
    """The labelled validation set (deterministic in `seed`) and per-recipe accepted/rejected counts.

    Injections the checker did not confirm are appended to `rejected` when given (label None), so
    the report can show what the diagnoser makes of them."""
    entries_per_category = entries_per_category or ENTRIES_PER_CATEGORY
    rng = random.Random(seed)
    bench = load_benchmark()
    cases: list[Case] = []
    tally: dict[str, Counter] = defaultdict(Counter)
    for category in CATEGORIES:
        pool = [e for e in bench.values() if e.category == category]
        for entry in rng.sample(pool, min(entries_per_category, len(pool))):
            for name, recipe in RECIPES.items():
                for _ in range(ATTEMPTS):
                    made = recipe(entry, rng)
                    if made is None:
                        tally[name]["not_applicable"] += 1
                        break
                    script, target, play_kwargs, accept = made
                    verdict, steps = play(entry, script, **play_kwargs)
                    label = accept(verdict, steps, target)
                    if label is not None:
                        break
                    tally[name]["rejected"] += 1
                    if rejected is not None:
                        rejected.append(Case(entry, name, target, None, verdict, steps))
                if made is None or label is None:
                    continue
                tally[name]["accepted"] += 1
                ends_early = {"abort_after", "abort_before", "max_steps"} & set(play_kwargs)
                # the episode ended in the target turn: every later turn is scored on the tags
                # the release gives turns after an early end
                later = range(target + 1, entry.num_turns) if ends_early else range(0)
                extra = [(u, after_end(entry, u)) for u in later]
                cases.append(Case(entry, name, target, label, verdict, steps, extra))
    # A trajectory the checker cannot read (not a list of turns): checker_error on every turn.
    for entry in rng.sample(list(bench.values()), 8):
        verdict = verify(entry, "not a trajectory")  # type: ignore[arg-type]
        unread = L.TurnLabel(L.CHECKER_ERROR, L.CHECKER_ERROR)
        cases.append(Case(entry, "malformed_trajectory", 0, unread, verdict, []))
        tally["malformed_trajectory"]["accepted"] += 1
    return cases, tally


# ---------------------------------------------------------------- metrics


def score(truth: list[str], predicted: list[str], vocabulary: tuple[str, ...] = L.LABELS) -> dict[str, Any]:
    """Confusion matrix, per-label precision/recall/F1 and macro-F1 over the labels in `truth`
    (rows and columns in `vocabulary` order)."""
    order = list(vocabulary) + sorted((set(truth) | set(predicted)) - set(vocabulary))
    present = [x for x in order if x in set(truth)]
    columns = [x for x in order if x in set(truth) | set(predicted)]
    confusion = {t: {p: 0 for p in columns} for t in present}
    for t, p in zip(truth, predicted):
        confusion[t][p] += 1
    per_label = {}
    for label in present:
        tp = confusion[label][label]
        n = sum(confusion[label].values())
        predicted_n = sum(1 for p in predicted if p == label)
        precision = tp / predicted_n if predicted_n else 0.0
        recall = tp / n if n else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_label[label] = {"n": n, "precision": precision, "recall": recall, "f1": f1}
    macro = sum(v["f1"] for v in per_label.values()) / len(per_label) if per_label else 0.0
    accuracy = sum(t == p for t, p in zip(truth, predicted)) / len(truth) if truth else 0.0
    return {"macro_f1": macro, "accuracy": accuracy, "per_label": per_label, "confusion": confusion}


AMBIGUITY_NOTES = {
    L.VALUE_MISMATCH: "(cause) Right tool, other argument values. A changed value that the backend "
    "rejects is a recovery_failure (the environment said so); one it accepts is a value_mismatch. "
    "Whether a value names an *instance* (a file, a ticket) or a quantity is not decidable from the "
    "trace: both count here. The release's instance_mismatch outcome is something else (differing "
    "backend classes) and never fires.",
    L.STATE_MISMATCH: "(cause) A dropped state-changing call is a state_mismatch, not a "
    "missing_tool_call: Table 5 ranks state_mismatch (3) above missing_tool_call (5).",
    L.INHERITED_STATE: "(cause) Decided by replaying the turn's own calls from the state the gold "
    "calls of the earlier turns leave, under the official check; the recipes make the target's calls "
    "exactly gold, so the truth holds by construction. A turn that is wrong on its own *and* inherits "
    "a wrong state gets its own cause, not this one.",
    L.RESPONSE_MISMATCH: "(cause) Only arises when every gold call of the turn was made with the gold "
    "values but the results still differ (wrong order of reads and writes); everything else is a more "
    "specific cause.",
    L.SPURIOUS_TOOL_CALL: "The official checker does not check turns whose gold is 'no call'; the tag "
    "is the release's (Table 6) and fires on any decoded call there. Undecodable text is no call "
    "(BFCL's reading), so a correct_abstention.",
    L.CHECKER_ERROR: "Only for trajectories the verifier cannot read; the recipe is synthetic. "
    "gt_error (broken gold) cannot be injected: the benchmark's gold replays cleanly (all 800 entries).",
}


def _table(result: dict[str, Any]) -> str:
    from seal.io import markdown_table

    rows = [[x, v["n"], v["precision"], v["recall"], v["f1"]] for x, v in result["per_label"].items()]
    return markdown_table(["label", "n", "precision", "recall", "F1"], rows)


def _confusion(result: dict[str, Any]) -> str:
    from seal.io import markdown_table

    columns = list(next(iter(result["confusion"].values())))
    return markdown_table(
        ["true \\ predicted"] + columns,
        [[t] + [row[c] for c in columns] for t, row in result["confusion"].items()],
    )


def write_report(
    out_dir: Path, diagnoser_name: str, result: dict[str, Any], tally: dict[str, Counter],
    unconfirmed: dict[str, dict[str, int]],
) -> str:
    from seal.io import markdown_table

    recipes = markdown_table(
        ["recipe", "accepted", "rejected", "not applicable"],
        [[name, c["accepted"], c["rejected"], c["not_applicable"]] for name, c in tally.items()],
    )
    notes = "\n".join(f"- **{k}**: {v}" for k, v in AMBIGUITY_NOTES.items())
    seen = [[name, ", ".join(f"{x} {n}" for x, n in counts.items())] for name, counts in unconfirmed.items()]
    unconfirmed_table = markdown_table(
        ["recipe", "labels (outcome / cause) given to its unconfirmed injections"], seen
    )
    goal = "met" if result["goal_met"] else "NOT met"
    layers = ""
    for layer, title in (("outcome", "Outcome (the release's per-turn tags: they drive the weights)"),
                         ("cause", "Cause (Table 5 and the project's causes: they drive the interface)")):
        r = result[layer]
        layers += f"""## {title}

Macro-F1 **{r['macro_f1']:.4f}**, accuracy {r['accuracy']:.4f}, lowest recall {r['min_recall']:.4f}
({r['min_recall_label']}).

{_table(r)}

Confusion matrix (rows: true label):

{_confusion(r)}

"""
    text = f"""# Diagnoser validation: {diagnoser_name}

{result['num_cases']} scored turns ({', '.join(f'{c} {n}' for c, n in result['by_category'].items())}),
seed {result['seed']}. Outcome macro-F1 **{result['outcome']['macro_f1']:.4f}**, cause macro-F1
**{result['cause']['macro_f1']:.4f}**.
Goal (rules diagnoser, in each layer: macro-F1 >= {GOAL_MACRO_F1}, every recall >= {GOAL_MIN_RECALL}): {goal}.

{layers}## Recipes

Each recipe injects one failure into a gold trajectory; a case is kept only when the executor and
the official checker confirm the injection (see seal/diagnosis/validate.py). Recipes that end the
episode early (step_limit, context_overflow, overflow_at_turn_start) also score every later turn.

{recipes}

## What this measures, and what it does not

The true cause is the intent of the recipe, confirmed by the executor and the official checker
(did the call error, did the turn fail, on state or on results); the true outcome is the official
per-turn check of the target turn (or what the recipe fixes by construction: no call, a call where
gold is "no call", a turn after the end). The score therefore says that the rules implement both
layers' definitions and the cause priority consistently on clean, single-failure turns of real
entries, in all four categories. It does not say that the causes agree with a human reading of real
model failures, where several failures mix; the priority decides those cases by construction.
Injections the checker did not confirm are not scored; here is what the diagnoser calls them (each
is a legitimate label for what actually happened):

{unconfirmed_table}

## Labels that are ambiguous by nature

{notes}
"""
    (out_dir / "report.md").write_text(text)
    return "\n\n".join(_table(result[layer]) for layer in L.LAYERS)


def layer_result(truth: list[str], predicted: list[str], layer: str) -> dict[str, Any]:
    result = score(truth, predicted, VOCABULARY[layer])
    worst = min(result["per_label"].items(), key=lambda kv: kv[1]["recall"])
    result.update(min_recall=worst[1]["recall"], min_recall_label=worst[0])
    result["goal_met"] = result["macro_f1"] >= GOAL_MACRO_F1 and result["min_recall"] >= GOAL_MIN_RECALL
    return result
