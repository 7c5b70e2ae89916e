"""Score of the last `mutmut run` per module, and the mutants the tests let through (`make mutate`).

Reads mutmut's result files (mutants/**/*.py.meta) and its own exit-code table. A module's score is
killed / (mutants - equivalent), where killed counts mutants a test failed on, timed out or that
broke the import; equivalent mutants are listed with a reason in tests/tools/equivalent_mutants.txt
("<mutant key> <fingerprint> <reason>" per line; the fingerprint is a hash of the mutant's changed lines,
which the report prints beside each survivor). Prints one row per module, then every surviving or untested
mutant with its changed lines (`mutmut show <key>` prints its diff). Exit code 1 when a module is under the
goal, or when a listed key is stale: it names a killed mutant (a timeout is not counted as one: a loaded machine
can time out an equivalent mutant's tests), a mutant the run's modules no longer have, or a mutant whose change
is not the one listed (mutmut renumbered the function's mutants).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

GOAL = 0.95
KILLED = {"killed", "timeout", "caught by type check", "segfault"}
REPO = Path(__file__).resolve().parents[2]


def equivalent(path: Path) -> dict[str, tuple[str, str]]:
    """{key: (fingerprint, reason)} from the equivalents file."""
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                key, _, rest = line.partition(" ")
                fingerprint, _, reason = rest.strip().partition(" ")
                out[key] = (fingerprint, reason.strip())
    return out


def collect(mutants: Path) -> dict[str, dict[str, str]]:
    """{module: {mutant key: status}} from mutmut's result files."""
    from mutmut.stats import status_by_exit_code

    by_module: dict[str, dict[str, str]] = defaultdict(dict)
    for meta in sorted(mutants.rglob("*.py.meta")):
        module = meta.relative_to(mutants).as_posix()[: -len(".meta")]
        for key, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            by_module[module][key] = status_by_exit_code[code]
    return by_module


def changed_lines(mutants: Path, module: str, key: str) -> list[str]:
    """The lines a mutant changes, '-' the original and '+' the mutant's (empty when mutants/ lacks the module)."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    cwd = os.getcwd()
    try:
        os.chdir(mutants.parent)  # mutmut reads mutants/<module> from the working directory
        diff = get_diff_for_mutant(key, path=module).splitlines()
    except (FileNotFoundError, OSError):
        return []
    finally:
        os.chdir(cwd)
    return [line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---")]


def fingerprint(lines: list[str]) -> str:
    """8 hex digits of the changed lines, blind to indentation (absent when there are none)."""
    if not lines:
        return "-"
    return hashlib.sha1("\n".join(line[0] + line[1:].strip() for line in lines).encode()).hexdigest()[:8]


@dataclasses.dataclass
class Report:
    rows: list[tuple[str, int, int, int, float]]  # module, checked, killed, equivalent, score
    left: list[tuple[str, str, str, list[str]]]  # status, key, fingerprint, changed lines
    stale: list[tuple[str, str]]  # key, why
    under: list[str]
    equivalent_file: str

    @property
    def failed(self) -> bool:
        return bool(self.under or self.stale)


def score(mutants: Path, equivalent_file: Path) -> Report:
    eq = equivalent(equivalent_file)
    rows, left, under, stale = [], [], [], []
    for module, statuses in sorted(collect(mutants).items()):
        checked = {k: s for k, s in statuses.items() if s != "not checked"}
        if not checked:
            continue  # outside this run's selection
        prefix = module.removesuffix(".py").replace("/", ".") + ".x"
        stale += [(k, "no such mutant") for k in eq if k.startswith(prefix) and k not in statuses]
        counted = {}
        for key, status in checked.items():
            lines = changed_lines(mutants, module, key) if status not in KILLED or key in eq else []
            # a listed mutant that ran out of time is no evidence against its reason: on a loaded machine an
            # equivalent mutant's tests can outlast the limit as well as the original's can
            if key in eq and status in KILLED and status != "timeout":
                stale.append((key, "killed"))
            elif key in eq and eq[key][0] != fingerprint(lines):
                stale.append((key, f"its change is now {fingerprint(lines)}: {' / '.join(lines)}"))
            elif key in eq:
                continue
            counted[key] = status
            if status not in KILLED:
                left.append((status, key, fingerprint(lines), lines))
        killed = sum(s in KILLED for s in counted.values())
        module_score = killed / len(counted) if counted else 1.0
        rows.append((module, len(checked), killed, len(checked) - len(counted), module_score))
        if module_score < GOAL:
            under.append(module)
    return Report(rows, left, sorted(stale), under, equivalent_file.name)


def print_report(report: Report) -> None:
    rows = report.rows
    print("| module | mutants checked | killed | equivalent | score |")
    print("|---|---|---|---|---|")
    for module, n, killed, n_eq, module_score in rows:
        print(f"| {module} | {n} | {killed} | {n_eq} | {module_score:.1%} |")
    scored = sum(r[1] - r[3] for r in rows)
    print(f"| all | {sum(r[1] for r in rows)} | {sum(r[2] for r in rows)} | {sum(r[3] for r in rows)} | "
          f"{sum(r[2] for r in rows) / scored if scored else 1.0:.1%} |")
    print(f"\n{len(report.left)} mutants not killed (`mutmut show <key>` prints one; an equivalent one goes into "
          f"{report.equivalent_file} as `<key> <fingerprint> <reason>`):")
    for status, key, fp, lines in report.left:
        print(f"  {status:10s} {key} {fp}  {' / '.join(lines)[:200]}")
    # a stale key would take a mutant out of the score that a test kills, or a different mutant than the
    # one its reason is about
    if report.stale:
        print(f"\n{len(report.stale)} stale keys in {report.equivalent_file} (list the survivors' keys and "
              "fingerprints instead):")
        for key, why in report.stale:
            print(f"  {key} ({why})")
    if report.under:
        print(f"\nunder the {GOAL:.0%} goal: {', '.join(report.under)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mutants", type=Path, default=REPO / "mutants")
    ap.add_argument("--equivalent", type=Path, default=REPO / "tests" / "tools" / "equivalent_mutants.txt")
    args = ap.parse_args(argv)
    if not collect(args.mutants):
        print(f"no mutmut results under {args.mutants}: run `make mutate`", file=sys.stderr)
        return 2
    report = score(args.mutants, args.equivalent)
    if not report.rows:
        print("no mutant was checked in the last run", file=sys.stderr)
        return 2
    print_report(report)
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
