"""The tables written out: report() reads the runs below a root and returns the Markdown text with the
rows behind it; write_outputs() writes that text, the CSVs and the figures (experiments.tables.figure)."""

from __future__ import annotations

import csv
from collections import Counter, defaultdict
from pathlib import Path

from experiments.tables.cells import ablation_table, main_table, ood_table, reference_rows
from experiments.tables.columns import (COLUMNS, HEADLINE, HEADLINE_LABEL, MODELS, PAPER_BUDGET, PROTOCOLS,
                                        TABLE2_HEADER)
from experiments.tables.differences import differences
from experiments.tables.paper_numbers import (BASE, PRINTED_AS_IS, REFERENCE_BASE_ROWS, REFERENCE_NOTES,
                                             TABLE2_COLUMNS, tau2_tasks_of_row)
from experiments.tables.runs import expected_seeds, read_manifest, survey
from seal.io import markdown_table

def _fmt(c: dict | None) -> str:
    """"—" for no value; a zero spread prints as 0; a cell over fewer runs than expected says so."""
    if c is None:
        return "—"
    text = f"{c['mean']:.2f}" + (f" ± {c['half']:.2f}" if c["half"] is not None else "")
    return text + (f" (n={c['n']} of {c['of']})" if c["n"] != c["of"] else "")


def _paper_fmt(value: float | None) -> str:
    """A paper number as the paper prints it, with two decimals in every table (Table 1's ToolACE-2-8B Vanilla RL
    Miss Func: "30.00 (+6.00)"; its reference rows' half points: "64.50")."""
    return "—" if value is None else f"{value:.2f}"


# -- output ------------------------------------------------------------------------------------------------

def _runs(row: dict) -> str:
    """"k of N": the row's runs of those expected ("no run": a row of the paper's that no run was expected for)."""
    return f"{row['runs']} of {row['expected']}" if row["expected"] else "no run"


def table1_notes(protocol: str, rows: list[dict]) -> list[str]:
    """The notes under Table 1's release-protocol table of `rows`: each number kept as printed that a row shows
    beside its run (a star), what the reference rows are."""
    if protocol != "release":
        return []
    starred = {(r["backbone"], r["arm"]) for r in rows if r["paper"] and not r.get("withheld")}
    return ([f"\\* {backbone} {arm}, {column}: {why}" for (table, (backbone, arm), column), why in PRINTED_AS_IS.items()
             if table == "table1" and (backbone, arm) in starred] + [_sentence(REFERENCE_NOTES["table1"])])


def _sentence(text: str) -> str:
    return text[0].upper() + text[1:]


def summary_markdown(rows: list[dict]) -> str:
    """Table 1's Avg: each model under both protocols, the paper's number beside the release column."""
    header = ["backbone", "arm", "model", "runs", "budget", PROTOCOLS["release"][2] + ": Avg", "paper",
              PROTOCOLS["official"][2] + ": Avg"]
    return markdown_table(header, [[r["backbone"], r["arm"], r["model"], _runs(r), r["budget"],
                                    _fmt(r[("release", "avg")]),
                                    "≠" if r.get("withheld") else _paper_fmt((r["paper"] or {}).get("avg")),
                                    _fmt(r[("official", "avg")])] for r in rows]) + withheld_notes(rows)


def withheld_notes(rows: list[dict]) -> str:
    """Under a Table 1/3 table, one note per row whose paper numbers are not shown ("≠") and why: its runs were
    not all evaluated on the paper's test entries (experiments.tables.like_measured.unlike_paper_split)."""
    return "".join(f"\n\n≠ {r['backbone']} {r['arm']}, {r['model']}: {r['withheld']}; the paper's numbers are not "
                   "shown beside it" for r in rows if r.get("withheld"))


def category_markdown(rows: list[dict], protocol: str, table: str = "table1") -> str:
    """Every column of one protocol; under the release protocol each cell has the paper's in parentheses
    (a star: kept as printed, PRINTED_AS_IS)."""
    header = ["backbone", "arm", "model", "runs", "budget", *COLUMNS]

    def render(row, column):
        star = "*" if (table, (row["backbone"], row["arm"]), column) in PRINTED_AS_IS else ""
        paper = (" (≠)" if row.get("withheld") else f" ({_paper_fmt(row['paper'][column])}{star})"
                 if row["paper"] else "") if protocol == "release" else ""
        return _fmt(row[(protocol, column)]) + paper

    return markdown_table(header, [[r["backbone"], r["arm"], r["model"], _runs(r), r["budget"],
                                    *(render(r, c) for c in COLUMNS)] for r in rows]) + (
        withheld_notes(rows) if protocol == "release" else "")


def table2_markdown(rows: list[dict]) -> str:
    """Every column of Table 2, the paper's number in parentheses (* where it is kept as printed), and the tau2
    task set of the runs with the paper's row's in parentheses. A tau2 column whose runs were measured on
    another task set than the paper's row shows "(≠)" instead of the paper's number, and a note says why."""
    def render(row, column):
        if not row["paper"]:
            return _fmt(row[column])
        if column in row["unlike"]:
            return f"{_fmt(row[column])} (≠)"
        star = "*" if ("table2", (row["backbone"], row["arm"]), column) in PRINTED_AS_IS else ""
        return f"{_fmt(row[column])} ({_paper_fmt(row['paper'][column])}{star})"

    def tasks(row):
        paper = tau2_tasks_of_row(row["backbone"], row["arm"])
        return row["tau2_tasks"] + (f" ({paper})" if paper else "")

    text = markdown_table(["backbone", "arm", "model", "runs", "budget", *TABLE2_HEADER, "tau2 tasks"],
                          [[r["backbone"], r["arm"], r["model"], _runs(r), r["budget"],
                            *(render(r, c) for c in TABLE2_COLUMNS), tasks(r)] for r in rows])
    present = {(r["backbone"], r["arm"]) for r in rows}
    notes = [f"\\* {backbone} {arm}, {column}: {why}" for (table, (backbone, arm), column), why in PRINTED_AS_IS.items()
             if table == "table2" and (backbone, arm) in present]
    notes += [f"≠ {r['backbone']} {r['arm']}: tau2 {reason}; the paper's numbers there are not shown beside it"
              for r in rows for reason in dict.fromkeys(r["unlike"].values())]
    notes += [f"{backbone} {BASE}: {why}" for (table, backbone), why in REFERENCE_BASE_ROWS.items()
              if table == "table2" and (backbone, BASE) in present]
    notes += [_sentence(REFERENCE_NOTES["table2"])] if any(r.get("reference") for r in rows) else []
    return text + "".join("\n\n" + note for note in notes)


def differences_markdown(diffs: list[dict]) -> str:
    rows = []
    for d in diffs:
        values = ([f"{d['diff']:+.2f}", f"[{d['ci_low']:+.2f}, {d['ci_high']:+.2f}]", f"{d['p']:.3f}", str(d["seeds"]),
                   str(d["entries"])] if "diff" in d else ["—", "—", "—", "0", "0"])
        rows.append([d["backbone"], d["comparison"], PROTOCOLS[d["protocol"]][2], *values, d["notes"] or "-"])
    return markdown_table(["backbone", "comparison", "protocol", "difference", "95% CI", "p", "seeds", "entries", "notes"], rows)


def evaluated_on(runs: list[dict]) -> str:
    """How many test entries each model of each run was evaluated on; every evaluation on another number than the
    paper's 400 is named with its run and model."""
    by_size: dict[int, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        for model, size in run["entries"].items():
            if size is not None:
                by_size[size][run["name"]].append(MODELS[model][0])
    parts = []
    for size, found in sorted(by_size.items()):
        if size == 400:
            evaluations = sum(len(models) for models in found.values())
            parts.append(f"400 test entries ({evaluations} evaluation{'s' * (evaluations != 1)} in {len(found)} "
                         f"run{'s' * (len(found) != 1)})")
        else:
            named = ", ".join(f"{name} ({', '.join(models)})" for name, models in found.items())
            parts.append(f"{size} test entries ({named}: not the 400-entry test part of the paper's tables, so not "
                         "comparable to them)")
    return "; ".join(parts) or "no test evaluation"


def budgets_line(runs: list[dict]) -> str:
    """Which budgets the runs used, and that rows under another than the paper's are not comparable to it."""
    counts = Counter(r["budget"] for r in runs)
    text = ", ".join(f"{name} ({n} run{'s' * (n != 1)})" for name, n in sorted(counts.items())) or "no run"
    others = sorted(name for name in counts if name != PAPER_BUDGET)
    if others:
        text += (f". The paper's numbers come from its own budget (budget={PAPER_BUDGET}); rows under "
                 f"{', '.join(others)} are not comparable to them")
    return text


def _entries(run: dict) -> str:
    """The test entries of a run's evaluations: one number when every model had as many, else each model's."""
    sizes = {MODELS[model][0]: n for model, n in run["entries"].items() if n is not None}
    if len(set(sizes.values())) == 1:
        return str(next(iter(sizes.values())))
    return ", ".join(f"{label} {n}" for label, n in sizes.items()) or "none"


def runs_markdown(runs: list[dict]) -> str:
    """One line per run the tables use: identity, budget, and the model its headline numbers come from."""
    lines = []
    for run in runs:
        model = MODELS[run["headline"]][0] if run["headline"] in run["evals"] else "none (not evaluated on test)"
        if run["headline"] == "best_on_val" and run["selected_round"] is not None:
            model += f" (round {run['selected_round']})"
        lines.append(f"- {run['name']}: {run['backbone']} {run['experiment']} seed {run['seed']}, budget {run['budget']}, "
                     f"split {run['split'] or 'not recorded'}, "
                     f"headline model: {model}, test entries: {_entries(run)}")
    return "\n".join(lines)


def report(root: Path, manifest_path: Path | None, n: int) -> tuple[str, dict]:
    """The Markdown text and the tables behind it."""
    manifest = read_manifest(manifest_path) if manifest_path and manifest_path.exists() else None
    runs, problems = survey(root, manifest)
    expected = expected_seeds(runs, problems)
    rows, diffs = main_table(runs, expected=expected), differences(runs, problems, n=n)
    headline_rows = main_table(runs, ("initial", HEADLINE), expected)
    table2, table3 = ood_table(runs, expected), ablation_table(runs, HEADLINE, expected)
    references = reference_rows("table1")
    expected_runs = len({(b, a, s) for (b, a), seeds in expected.items() if a != BASE for s in seeds})
    text = (f"# BFCL V3 multi-turn accuracy (%), mean ± 95% t-interval over seeds; {len(runs)} of {expected_runs} "
            f"expected runs used\n\n"
            f"Evaluated on: {evaluated_on(runs)}. Budgets: {budgets_line(runs)}. Expected runs: "
            + (f"{len(manifest)} from {manifest_path}" if manifest is not None else
               "no manifest (runs never created cannot be named; experiments.reproduce writes one)") + "\n\n"
            "## Table 1: Avg of every model under both protocols\n\n" + summary_markdown(rows + references) + "\n")
    for protocol in PROTOCOLS:
        text += (f"\n## Table 1, every column: {HEADLINE_LABEL}, {PROTOCOLS[protocol][2]}"
                 + (" (the paper's number in parentheses)" if protocol == "release" else "") + "\n\n"
                 + category_markdown(headline_rows + (references if protocol == "release" else []), protocol) + "\n")
        text += "".join(f"\n{note}\n" for note in table1_notes(protocol, headline_rows))
    if any(not r.get("reference") for r in table2):
        text += ("\n## Table 2: out of domain, the base model before and every arm after training (%; BFCL V4 = mean "
                 "of web search and memory; tau2 = tau2-bench's mean over its domains; the paper's number in "
                 "parentheses)\n\n" + table2_markdown(table2) + "\n")
    else:
        text += "\n## Table 2: no run has an out-of-domain evaluation (budget.ood_benchmarks)\n"
    if table3:
        for protocol in PROTOCOLS:
            text += (f"\n## Table 3: ablations, {HEADLINE_LABEL}, {PROTOCOLS[protocol][2]}"
                     + (" (the paper's number in parentheses, Qwen2.5-7B)" if protocol == "release" else "") + "\n\n"
                     + category_markdown(table3, protocol, "table3") + "\n")
    if diffs:
        text += (f"\n## Differences (accuracy points), {HEADLINE_LABEL}, paired bootstrap over seeds and entries "
                 "(experiments.tables.differences.bootstrap_replicates)\n\n" + differences_markdown(diffs) + "\n")
    if runs:
        text += f"\n## Runs used ({len(runs)})\n\n" + runs_markdown(runs) + "\n"
    if problems:
        text += f"\n## Runs not used, missing, failed, unfinished, damaged or incomplete ({len(problems)})\n\n" + "\n".join(
            f"- {p['dir']}: {p['state']}" for p in problems) + "\n"
    return text, {"rows": rows, "headline": headline_rows, "table2": table2, "table3": table3, "diffs": diffs,
                  "references": references}


def _write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)


def _csv_cell(c) -> list:
    return [None, None, 0] if c is None else [c["mean"], c["half"], c["n"]]


def _protocol_rows(rows: list[dict]) -> list[list]:
    """Table 1 or 3 rows, one line per protocol (a reference row of the paper's: the release protocol's only):
    identity, runs of expected, budget, then per column the mean, 95% half-width, runs with a value and
    (release protocol) the paper's number, and last why the paper's numbers are not beside the row (its "≠" note;
    empty where they are, or where the paper has no such row)."""
    return [[r["backbone"], r["arm"], r["model"], protocol, r["runs"], r["expected"], r["budget"],
             *(v for c in COLUMNS for v in (*_csv_cell(r[(protocol, c)]),
                                            (r["paper"] or {}).get(c) if protocol == "release" else None)),
             r.get("withheld")]
            for r in rows for protocol in PROTOCOLS if protocol == "release" or not r.get("reference")]


def write_outputs(out: Path, text: str, t: dict) -> None:
    from experiments.tables.figure import plot, plot_table2

    out.mkdir(parents=True, exist_ok=True)
    (out / "tables.md").write_text(text)
    identity_header = ["backbone", "arm", "model", "protocol", "runs", "expected", "budget"]
    per_column = [f"{c}_{s}" for c in COLUMNS for s in ("mean", "ci95", "n", "paper")] + ["paper_withheld"]
    _write_csv(out / "tables.csv", identity_header + per_column, _protocol_rows(t["rows"] + t["references"]))
    _write_csv(out / "table3.csv", identity_header + per_column, _protocol_rows(t["table3"]))
    # the paper's number only where the runs were measured as it was (a tau2 column: on its row's task set)
    _write_csv(out / "table2.csv",
               ["backbone", "arm", "model", "runs", "expected", "budget",
                *(f"{c}_{s}" for c in TABLE2_COLUMNS for s in ("mean", "ci95", "n", "paper")), "tau2_tasks",
                "tau2_tasks_paper"],
               [[r["backbone"], r["arm"], r["model"], r["runs"], r["expected"], r["budget"],
                 *(v for c in TABLE2_COLUMNS
                   for v in (*_csv_cell(r[c]), None if c in r["unlike"] else (r["paper"] or {}).get(c))),
                 r["tau2_tasks"], tau2_tasks_of_row(r["backbone"], r["arm"])] for r in t["table2"]])
    keys = ("backbone", "comparison", "protocol", "model", "diff", "ci_low", "ci_high", "p", "seeds", "entries", "notes")
    _write_csv(out / "differences.csv", list(keys), [[d.get(k) for k in keys] for d in t["diffs"]])
    has_release = any(r[("release", "avg")] for r in t["headline"])
    plot(t["headline"] + (t["references"] if has_release else []), out / "tables.png",
         "release" if has_release else "official", HEADLINE_LABEL)
    if any(not r.get("reference") for r in t["table2"]):
        plot_table2(t["table2"], out / "table2.png")


OUTPUTS = ("tables.md", "tables.csv", "table2.csv", "table3.csv", "differences.csv", "tables.png", "table2.png")

