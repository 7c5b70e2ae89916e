"""The bar charts experiments.aggregate writes: tables.png (Table 1's and Table 3's Avg) and table2.png
(every column of Table 2).

Bars are grouped by backbone, each group centred under its backbone's tick whatever arms it has, one
colour per arm across groups. Each bar carries its symmetric 95% error bar (never clipped at zero), the
paper's number as a hollow diamond (never a dash, which an error bar's cap would look like), and above
both its run count "k of N" (runs with a value of the runs expected), so a missing run shows. The paper's
reference rows (models no run here trains) follow the backbones, each a diamond alone marked "reference".
In table2.png a tau2 panel shows the paper's number only above runs measured on the task set of its row.
"""

from __future__ import annotations

from pathlib import Path

from experiments.tables.paper_numbers import BASE

ARM_ORDER = (BASE, "vanilla_rl", "wo_env_adaptation", "wo_reweighting", "wo_closed_loop", "seal")
COLUMN_TITLES = {"bfcl_v4": "BFCL V4 Avg", "bfcl_v4_web_search": "BFCL V4 Web Search", "bfcl_v4_memory": "BFCL V4 Memory",
                 "tau2": "tau2-bench Avg", "tau2_retail": "tau2 Retail", "tau2_airline": "tau2 Airline",
                 "tau2_telecom": "tau2 Telecom"}
PAPER_MARK = {"marker": "D", "markersize": 4.5, "markerfacecolor": "white", "markeredgecolor": "black",
              "markeredgewidth": 1.0, "linestyle": "none", "zorder": 5}


def wrapped(text: str, fig, fontsize: float) -> str:
    """`text` broken into lines that fit the figure's width at `fontsize` (matplotlib draws a title on one line
    per newline, centred: a longer line runs past both edges of the canvas). An average character is taken as
    0.6 of the font size wide, a little wider than DejaVu Sans's."""
    import textwrap

    width_points = fig.get_figwidth() * 72 * 0.95
    return textwrap.fill(text, width=max(20, int(width_points / (0.6 * fontsize))), break_on_hyphens=False)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def arm_order(arms) -> list[str]:
    """The paper's order (base model, vanilla RL, the ablations, SEAL), then any other arm by name."""
    arms = set(arms)
    return [a for a in ARM_ORDER if a in arms] + sorted(arms - set(ARM_ORDER))


def _in_order(rows: list[dict]) -> list[dict]:
    """The backbones' rows by backbone, then the paper's reference rows in the paper's order."""
    return sorted(rows, key=lambda r: (r.get("reference", False), "" if r.get("reference") else r["backbone"]))


def draw_bars(ax, bars: list[dict], arms: list[str]) -> tuple[float, float]:
    """`bars`: {"backbone", "arm", "cell" (mean, half, n, of, or None), "paper" (or None), "runs",
    "expected"}. Draws them grouped by backbone (in first-seen order) and returns the lowest and highest
    y drawn."""
    backbones = list(dict.fromkeys(b["backbone"] for b in bars))
    per_group = max((sum(b["backbone"] == name for b in bars) for name in backbones), default=1)
    width = 0.8 / per_group
    x = {}
    for j, name in enumerate(backbones):
        mine = sorted((b for b in bars if b["backbone"] == name), key=lambda b: arms.index(b["arm"]))
        for k, bar in enumerate(mine):
            x[id(bar)] = j + (k - (len(mine) - 1) / 2) * width
    low, high = 0.0, 1.0
    for i, arm in enumerate(arms):
        xs, means, halves = [], [], []
        for bar in (b for b in bars if b["arm"] == arm):
            c, top = bar["cell"], 0.0
            if c is not None:
                half = c["half"] or 0.0
                xs.append(x[id(bar)]), means.append(c["mean"]), halves.append(half)
                low, top = min(low, c["mean"] - half), max(top, c["mean"] + half)
            if bar["paper"] is not None:
                ax.plot([x[id(bar)]], [bar["paper"]], gid="paper", **PAPER_MARK)
                top = max(top, bar["paper"])
            label = ("reference" if bar.get("reference") else f"{bar['runs']} of {bar['expected']}"
                     + ("" if c is not None else ", no value"))
            ax.annotate(label, (x[id(bar)], top), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom",
                        rotation=90, fontsize=6, gid="runs")
            high = max(high, top)
        if xs:
            ax.bar(xs, means, width=width * 0.92, yerr=halves, capsize=2, label=arm, color=f"C{i}",
                   error_kw={"elinewidth": 0.8, "capthick": 0.8})
    # many groups (the paper's reference rows among them): slanted names, so that neighbours do not overlap
    slant = {"rotation": 25, "ha": "right"} if len(backbones) > 4 else {}
    ax.set_xticks(range(len(backbones)), backbones, fontsize=7, **slant)
    ax.set_xlim(-0.5, len(backbones) - 0.5)
    span = high - low
    # room above the highest mark for the vertical run counts
    ax.set_ylim(low - 0.05 * span if low < 0 else 0, high + 0.3 * span)
    return low, high


def _legend(ax, with_paper: bool) -> None:
    if with_paper:
        ax.plot([], [], label="the paper", **PAPER_MARK)
    ax.legend(fontsize=6, loc="upper left")


def figure(rows: list[dict], protocol: str, model_label: str):
    """Table 1's rows (and the ablation arms of Table 3, which share them): the BFCL V3 Avg of `protocol`
    per backbone and arm; under the release protocol the paper's Avg (Table 1, else Table 3) on each bar
    that has one."""
    from experiments.tables.columns import PROTOCOLS

    plt = _pyplot()
    rows = _in_order(rows)
    arms = arm_order(r["arm"] for r in rows)
    bars = [{"backbone": r["backbone"], "arm": r["arm"], "cell": r[(protocol, "avg")], "runs": r["runs"],
             "expected": r["expected"], "reference": r.get("reference", False),
             # the row's paper number: none where its runs were not measured as the paper's row was (withheld)
             "paper": None if protocol != "release" else (r["paper"] or {}).get("avg")} for r in rows]
    groups = len({r["backbone"] for r in rows})
    fig, ax = plt.subplots(figsize=(max(4.5, 0.45 * len(rows) + 1.2 * groups), 4.0))
    draw_bars(ax, bars, arms)
    ax.axhline(0, color="black", linewidth=0.5)
    ax.set_ylabel("BFCL V3 multi-turn Avg (%)")
    title = (f"{PROTOCOLS[protocol][2]}; mean ± 95% CI over seeds; above each bar: runs of expected"
             + ("; ◇ the paper (Tables 1, 3; its reference rows last)" if protocol == "release" else ""))
    ax.set_title(wrapped(f"{model_label}. {title}", fig, 7), fontsize=7)
    _legend(ax, any(b["paper"] is not None for b in bars))
    fig.tight_layout()
    return fig


def table2_figure(rows: list[dict]):
    """Every column of Table 2 in its own panel: the base model before and each arm after training, per
    backbone, the paper's number on each bar that has one."""
    from experiments.tables.paper_numbers import TABLE2_COLUMNS

    plt = _pyplot()
    rows = _in_order(rows)
    arms = arm_order(r["arm"] for r in rows)
    fig, axes = plt.subplots(2, 4, figsize=(14, 6.5))
    for ax, column in zip(axes.flat, TABLE2_COLUMNS):
        bars = [{"backbone": r["backbone"], "arm": r["arm"], "cell": r[column], "runs": r["runs"],
                 "expected": r["expected"], "reference": r.get("reference", False),
                 "paper": None if column in r["unlike"] else (r["paper"] or {}).get(column)} for r in rows]
        draw_bars(ax, bars, arms)
        ax.set_title(COLUMN_TITLES[column], fontsize=8)
        ax.set_ylabel("%", fontsize=7)
        ax.tick_params(labelsize=6)
    last = axes.flat[-1]
    last.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    for ax in list(axes.flat)[1:-1]:  # an arm may have bars in some panels only
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle), labels.append(label)
    mark = last.plot([], [], label="the paper", **PAPER_MARK)[0]
    last.legend([*handles, mark], [*labels, "the paper"], loc="center", fontsize=8)
    fig.suptitle(wrapped("Table 2, out of domain: base model before training, each arm's final model; mean ± 95% CI "
                         "over seeds; above each bar: runs of expected; ◇ the paper (in a tau2 panel only above runs "
                         "measured on its row's task set), its reference rows last", fig, 9), fontsize=9)
    fig.tight_layout()
    return fig


def plot(rows: list[dict], path: Path, protocol: str, model_label: str) -> None:
    plt = _pyplot()
    fig = figure(rows, protocol, model_label)
    fig.savefig(path, dpi=150)
    plt.close(fig)


def plot_table2(rows: list[dict], path: Path) -> None:
    plt = _pyplot()
    fig = table2_figure(rows)
    fig.savefig(path, dpi=150)
    plt.close(fig)
