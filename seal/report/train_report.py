"""report.md and curves.png of a training run, rebuilt from the round history after every round."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from seal.diagnosis import LAYERS
from seal.env.benchmarks.bfcl_v3 import CATEGORIES
from seal.io import markdown_table
from seal.report.clock import round_seconds

# BFCL V3's categories, then their mean
EVAL_KEYS = (*CATEGORIES, "avg")
# each held-out evaluation's protocols, as the report labels them (seal.evaluation.evaluate)
EVAL_PROTOCOLS = (("release", "eval/bfcl_v3_release", "comparable to the paper"),
                  ("bfcl", "eval/bfcl_v3", "comparable to the BFCL leaderboard"))


def write_metrics_log(path: Path, history: list[Any]) -> None:
    """metrics.jsonl: one line per completed round (rewritten whole, so a resumed run stays exact)."""
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as fh:
        for record in history:
            fh.write(json.dumps({"round": record.round, "global_step": record.global_step, **record.metrics}) + "\n")
    tmp.replace(path)


def _top_labels(counts: dict[str, int], layer: str, k: int = 3) -> str:
    """The layer's k most frequent labels with their shares; `counts` keys are "<layer>/<label>"."""
    mine = {key.split("/", 1)[1]: n for key, n in counts.items() if key.startswith(f"{layer}/")}
    total = sum(mine.values()) or 1
    top = sorted(mine.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
    return ", ".join(f"{label} {count / total:.0%}" for label, count in top) or "-"


def round_line(record: Any, planned: int | None = None, left: str | None = None) -> str:
    """The console's one line per round: reward, turn pass rate, the most frequent outcome, what the
    interface changed, the round's seconds and, with `left`, the job's clock (seal.report.clock)."""
    m = record.metrics
    seconds = round_seconds(m)
    top = _top_labels(record.labels, "outcome", k=1)
    change = record.interface_diff.replace("\n", "; ") if record.interface_diff else "unchanged"
    return (f"[{record.round + 1}/{planned or '?'}] round {record.round} | reward {m.get('train/reward_mean', 0.0):.3f} "
            f"| turn pass rate {m.get('train/turn_pass_rate', 0.0):.3f} | top outcome {top} | interface {change} "
            f"| {seconds:.1f} s" + (f" | {left}" if left else ""))


def _rho_changes(rho: dict[str, float], rho0: dict[str, float]) -> str:
    moved = [f"{k} {v:.3f}" for k, v in sorted(rho.items()) if abs(v - rho0.get(k, v)) > 5e-4]
    return ", ".join(moved) or "= rho0"


def _num(metrics: dict[str, Any], key: str, fmt: str = ".3f") -> str:
    return format(metrics[key], fmt) if metrics.get(key) is not None else "-"


def plot_curves(path: Path, history: list[Any], title: str = "") -> None:
    """curves.png (curves_figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = curves_figure(history, title)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def curves_figure(history: list[Any], title: str = "") -> Any:
    """Reward, the two label profiles, rho and the weights per round; `title` above (arm, backbone, seed),
    whole rounds on the x axes, each legend below its panel, clear of the lines."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    rounds = [r.round for r in history]
    fig, axes = plt.subplots(1, 4, figsize=(20, 5.5), layout="constrained")
    if title:
        fig.suptitle(title)
    for key, label in [("train/reward_mean", "reward mean (pass rate)"), ("train/turn_pass_rate", "turn pass rate")]:
        axes[0].plot(rounds, [r.metrics.get(key, float("nan")) for r in history], marker="o", label=label)
    axes[0].set_title("verifier reward")
    for ax, layer in zip(axes[1:3], LAYERS):
        prefix = f"diag/{layer}/"
        keys = sorted({k for r in history for k in r.metrics if k.startswith(prefix)} - {prefix + "num_turns"})
        for key in keys:
            shares = [r.metrics.get(key, 0.0) for r in history]
            ax.plot(rounds, shares, marker=".", label=key.removeprefix(prefix))
        ax.set_title(f"{layer} profile (C_t, prevalence)")
    for key in sorted({k for r in history for k in r.metrics if k.startswith("reweight/rho/")}):
        axes[3].plot(rounds, [r.metrics.get(key, float("nan")) for r in history], label=key.removeprefix("reweight/rho/"))
    if any("reweight/weight_mean" in r.metrics for r in history):
        axes[3].plot(rounds, [r.metrics.get("reweight/weight_mean", float("nan")) for r in history],
                     "k--", marker="o", label="mean weight")
    axes[3].set_title("rho and trajectory weights")
    for ax in axes:
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncols=2, frameon=False)
    return fig


def eval_rows(evals: dict[str, dict[str, Any]]) -> list[list[Any]]:
    """One row per model and protocol played: the release's ("comparable to the paper") and BFCL's
    ("comparable to the BFCL leaderboard")."""
    rows = []
    for name, metrics in evals.items():
        for protocol, prefix, label in EVAL_PROTOCOLS:
            if f"{prefix}/avg" in metrics:
                rows.append([name, f"{protocol} ({label})"] + [metrics.get(f"{prefix}/{k}", float("nan")) for k in EVAL_KEYS])
    return rows


def split_section(leakage: dict[str, Any]) -> list[str]:
    """report.md's words on leakage.json: whether the parts share a task, and why when they do."""
    lines = ["", "## Split", "", "Parts (entries): " + ", ".join(f"{k} {v}" for k, v in leakage["sizes"].items()) + "."]
    if leakage["leak_free"]:
        lines += ["", "`leakage.json`: `leak_free: true`, no scenario and no duplicate-scenario group on two sides."]
    else:
        lines += ["", f"`leakage.json`: `leak_free: false`. {leakage['note']}"]
    return lines


def write_train_report(out_dir: Path, *, title: str, header: dict[str, Any], history: list[Any],
                       rho0: dict[str, float], evals: dict[str, dict[str, Any]], timing: dict[str, float],
                       ood: dict[str, dict[str, dict[str, Any]]] | None = None,
                       leakage: dict[str, Any] | None = None, curves_title: str = "") -> None:
    lines = [f"# {title}", ""]
    lines += [f"- {k}: {v}" for k, v in header.items()]
    if leakage:
        lines += split_section(leakage)
    lines += ["", "## Rounds", ""]
    rows = []
    for r in history:
        m = r.metrics
        weight = (
            f"{m['reweight/weight_mean']:.3f} [{m['reweight/weight_min']:.2f}, {m['reweight/weight_max']:.2f}]"
            if "reweight/weight_mean" in m else "off"
        )
        change = r.interface_diff.replace("\n", "; ") if r.interface_diff else "-"
        rows.append([r.round, r.global_step, m.get("train/reward_mean", 0.0), m.get("train/turn_pass_rate", 0.0),
                     _top_labels(r.labels, "outcome"), _top_labels(r.labels, "cause"),
                     _rho_changes(r.rho, rho0), weight, change])
    lines.append(markdown_table(
        ["round", "step", "reward mean", "turn pass rate", "outcomes (top 3)", "causes (top 3)",
         "rho before update", "weight mean [min, max]", "interface change"], rows))
    lines += ["", "Outcomes are the release's per-turn tags (Table 6; they drive the weights unless "
              "reweighting.profile_layer=cause); causes are Table 5's and the project's (they drive "
              "the interface)."]
    lines += ["", "## Optimisation signals", "",
              "Zero-spread groups have equal rewards and so zero advantages: their weights change nothing. The "
              "effective weights are those of the other trajectories. KL is the release's low-variance KL (verl's "
              "low_var_kl) to the reference model; clip is the share of tokens whose ratio was clipped; means over "
              "the round's steps.",
              ""]
    lines.append(markdown_table(
        ["round", "zero-spread groups", "effective weight mean (n)", "KL", "clip ratio", "entropy", "grad norm", "loss"],
        [[r.round, _num(r.metrics, "train/zero_spread_groups_frac"),
          f"{r.metrics['reweight/effective_mean']:.3f} ({int(r.metrics['reweight/effective_count'])})"
          if "reweight/effective_mean" in r.metrics else "-",
          _num(r.metrics, "train/kl", ".2e"), _num(r.metrics, "train/clip_ratio/region_mean"),
          _num(r.metrics, "train/entropy"), _num(r.metrics, "train/grad_norm"), _num(r.metrics, "train/loss", ".2e")]
         for r in history]))
    if evals:
        lines += ["", "## Held-out evaluation (greedy, plain benchmark interface)", ""]
        lines.append(markdown_table(["model", "protocol"] + list(EVAL_KEYS), eval_rows(evals)))
    if ood:
        lines += ["", "## Out-of-domain evaluation (accuracy; budget.ood_benchmarks)", ""]
        rows = [[when.removeprefix("ood_"), name, metrics[f"eval/{name}/avg"],
                 ", ".join(f"{c} {n['passed']}/{n['total']}" for c, n in metrics["counts"].items())]
                for when, found in ood.items() for name, metrics in found.items()]
        lines.append(markdown_table(["model", "benchmark", "average", "passed per category"], rows))
    if timing:
        total = sum(timing.values()) or 1.0
        lines += ["", "## Where a round's time goes", ""]
        lines.append(markdown_table(["part", "seconds", "share"],
                                    [[k, round(v, 2), f"{v / total:.1%}"] for k, v in timing.items()]))
    lines += ["", "![curves](curves.png)", ""]
    (out_dir / "report.md").write_text("\n".join(lines))
    if history:
        plot_curves(out_dir / "curves.png", history, curves_title)
