"""The package order docs/development.md's Layout section describes: every import, at module level or
inside a function, points down the pipeline (io, errors < env < budget < diagnosis < interface < policy <
evaluation < report < rl < tasks), and no module imports itself round a circle, within a package or across
seal/, experiments/ and tests/."""

import ast
import re
from pathlib import Path

SEAL = Path(__file__).resolve().parents[1] / "seal"
ORDER = ["io", "errors", "env", "budget", "diagnosis", "interface", "policy", "evaluation", "report", "rl", "tasks"]
RANK = {name: i for i, name in enumerate(ORDER)}
RANK["errors"] = RANK["io"]  # both are leaves


def package_of(path: Path) -> str:
    parts = path.relative_to(SEAL).parts
    return parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")


def project_imports(path: Path) -> set[str]:
    """The seal packages a module imports (the first name after `seal.`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "seal":
            parts = node.module.split(".")
            found |= {parts[1]} if len(parts) > 1 else {alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("seal.")}
    return found


def test_every_module_imports_only_downward():
    modules = [p for p in SEAL.rglob("*.py") if p.name != "__init__.py" or p.parent != SEAL]
    assert {package_of(p) for p in modules} == set(ORDER), "a package the order does not name"
    upward = [(str(p.relative_to(SEAL)), target) for p in modules for target in project_imports(p)
              if target != package_of(p) and RANK[target] > RANK[package_of(p)]]
    assert upward == []


def test_the_bottom_layer_imports_nothing_of_the_project():
    assert project_imports(SEAL / "io.py") == set()
    assert project_imports(SEAL / "errors.py") == set()


def test_the_checker_sees_an_upward_import(tmp_path):
    # the test above would pass vacuously if project_imports found nothing: it must see these
    module = tmp_path / "m.py"
    module.write_text("from seal.rl.trainer import make_trainer\n\ndef f():\n    import seal.tasks.train\n")
    assert project_imports(module) == {"rl", "tasks"}


def module_names(root: Path) -> dict[str, Path]:
    """Every module of the package at `root` by dotted name (a package by its own name)."""
    names = {}
    for path in root.rglob("*.py"):
        parts = (root.name, *path.relative_to(root).with_suffix("").parts)
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def import_graph(*roots: Path) -> dict[str, set[str]]:
    """Module -> the modules of the packages at `roots` it imports, at module level or inside functions:
    `import a.b.c` and `from a.b import c` (c a module) import a.b.c; `from a.b import name` imports a.b."""
    modules = {name: path for root in roots for name, path in module_names(root).items()}
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package, one level up per extra dot
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}".rstrip(".")
                targets |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
        graph[name] = {t for t in targets if t in modules} - {name}
    return graph


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of imports (its modules, the first repeated at the end), or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state and (circle := visit(target)):
                return circle
        path.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state and (circle := visit(module)):
            return circle
    return None


def test_no_circle_of_imports_among_the_modules():
    graph = import_graph(SEAL)
    assert {"seal.env.episode", "seal.env.benchmarks", "seal.env.benchmarks.base"} <= set(graph)
    assert "seal.env.benchmarks.bfcl_v3" in graph["seal.env.benchmarks"]  # `from seal.env.benchmarks import bfcl_v3`
    assert find_circle(graph) is None


EXPERIMENTS = SEAL.parent / "experiments"


def test_no_circle_of_imports_among_experiments_and_nothing_of_it_imported_by_seal():
    graph = import_graph(EXPERIMENTS)
    # the command reaches the tables through their writer; no module of the tables imports a command back
    assert "experiments.tables.write" in graph["experiments.aggregate"]
    assert "experiments.measure.preflight.disk" in graph["experiments.cluster.needs"]
    assert find_circle(graph) is None
    assert not any(module.startswith("experiments") for p in SEAL.rglob("*.py") for module in imported_modules(p))


def test_no_circle_of_imports_across_seal_experiments_and_tests():
    # the tests and the project's upkeep tools (tests/tools: make mutate, make docs) import seal/ and experiments/;
    # a circle through them would pass the two tests above, which each see one package
    graph = import_graph(SEAL, EXPERIMENTS, SEAL.parent / "tests")
    assert "tests.tools.mutation_report" in graph["tests.tools.mutate"]
    assert {"seal.errors", "experiments.measure.preflight.node"} <= graph["experiments.gpu_check"]
    assert "experiments.tables.write" in graph["tests.experiments.test_aggregate"]
    assert find_circle(graph) is None


def test_the_checker_sees_a_circle_across_two_packages(tmp_path):
    for package, text in (("p", "from q.b import y\n\nx = 1\n"), ("q", "def y():\n    from p.a import x\n")):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
        (tmp_path / package / ("a.py" if package == "p" else "b.py")).write_text(text)
    assert find_circle(import_graph(tmp_path / "p")) is None  # one package alone: the edge to q is not seen
    assert find_circle(import_graph(tmp_path / "p", tmp_path / "q")) == ["p.a", "q.b", "p.a"]


def imported_modules(path: Path) -> set[str]:
    """Every module name a file imports (`import a.b`, `from a.b import c`: a.b)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_experiments_holds_its_commands_and_one_folder_per_job_of_short_modules():
    commands = {p.stem for p in EXPERIMENTS.glob("*.py")} - {"__init__"}
    assert commands == {"aggregate", "reproduce", "gpu_check", "bench"}
    assert {p.name for p in EXPERIMENTS.iterdir() if p.is_dir() and p.name != "__pycache__"} == {
        "tables", "cluster", "measure"}
    long = {str(p.relative_to(EXPERIMENTS)): n for p in EXPERIMENTS.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}
    # a command is its usage and its argument parsing: the work is in its folder
    assert all(len((EXPERIMENTS / f"{c}.py").read_text().splitlines()) < 200 for c in commands)
    # make bench's command defines no section: each is a function of experiments/measure/
    from experiments import bench

    assert list(bench.SECTIONS) == ["executor", "throughput", "rollout", "memory", "memory_measured", "vllm",
                                   "main_job"]
    assert {fn.__module__.rpartition(".")[0] for fn in bench.SECTIONS.values()} == {"experiments.measure"}
    assert [n.name for n in ast.parse((EXPERIMENTS / "bench.py").read_text()).body
            if isinstance(n, ast.FunctionDef)] == ["usage", "main"]


def test_every_module_the_makefile_runs_is_a_command_of_the_project():
    """make bench, mutate, gpu-kit and docs keep running after a move: each `-m` module of the project that the
    Makefile names is a file with a `__main__` block (the rest are pip, venv and pytest)."""
    makefile = (SEAL.parent / "Makefile").read_text()
    named = set(re.findall(r"\$\(PY(?:THON)?\) -m ([\w.]+)", makefile))
    ours = {m for m in named if m.split(".")[0] in {"seal", "experiments", "tests"}}
    assert named - ours == {"venv", "pip", "pytest"}
    assert ours == {"experiments.bench", "tests.tools.mutate", "tests.tools.gpu_kit", "tests.tools.docs"}
    for module in ours:
        path = SEAL.parent / (module.replace(".", "/") + ".py")
        assert path.is_file() and 'if __name__ == "__main__":' in path.read_text(), module


def test_bfcl_v3s_data_and_its_verdict_are_one_module():
    module = SEAL / "env" / "benchmarks" / "bfcl_v3.py"
    defined = {n.name for n in ast.parse(module.read_text()).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert {"load_benchmark", "get_entries", "category_summary", "scenario_of", "BFCLV3"} <= defined
    assert not (SEAL / "env" / "benchmark.py").exists()


def test_the_checker_sees_a_circle_through_a_function_level_import(tmp_path):
    # the test above would pass vacuously if the graph missed imports: pkg.a -> pkg.b -> pkg.c.d -> pkg.a
    package = tmp_path / "pkg"
    (package / "c").mkdir(parents=True)
    for path in (package / "__init__.py", package / "c" / "__init__.py"):
        path.write_text("")
    (package / "a.py").write_text("from pkg import b\n\nx = 1\n")
    (package / "b.py").write_text("def f():\n    import pkg.c.d\n")
    (package / "c" / "d.py").write_text("from pkg.a import x\nfrom . import e\n")
    (package / "c" / "e.py").write_text("")
    graph = import_graph(package)
    assert graph == {"pkg": set(), "pkg.c": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.c.d"},
                     "pkg.c.d": {"pkg.a", "pkg.c.e"}, "pkg.c.e": set()}
    assert find_circle(graph) == ["pkg.a", "pkg.b", "pkg.c.d", "pkg.a"]
    (package / "b.py").write_text("def f():\n    import os\n")
    assert find_circle(import_graph(package)) is None


def function_lengths(path: Path) -> dict[str, int]:
    """Lines of every module-level function and method of a module (class.method); a nested function
    counts as part of the one it is in."""
    lengths = {}
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    for node in ast.parse(path.read_text()).body:
        members = [(f"{node.name}.", m) for m in node.body] if isinstance(node, ast.ClassDef) else [("", node)]
        for prefix, item in members:
            if isinstance(item, functions):
                lengths[prefix + item.name] = item.end_lineno - item.lineno + 1
    return lengths


def test_no_function_in_seal_is_over_100_lines():
    long = [(str(p.relative_to(SEAL)), name, n) for p in SEAL.rglob("*.py")
            for name, n in function_lengths(p).items() if n > 100]
    assert long == []


def test_the_training_task_reads_as_named_steps_of_at_most_60_lines():
    lengths = function_lengths(SEAL / "tasks" / "train.py")
    steps = ["start", "check_config", "build", "evaluate_before", "fit", "evaluate_after", "report"]
    # train() is the steps in order, one call each (the report on the main rank only)
    train = next(n for n in ast.walk(ast.parse((SEAL / "tasks" / "train.py").read_text()))
                 if isinstance(n, ast.FunctionDef) and n.name == "train")
    called = [c.func.id for c in ast.walk(train) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)]
    assert [c for c in called if c in steps] == steps
    assert {name: n for name, n in lengths.items() if n > 60} == {}


def test_function_lengths_counts_methods_and_functions(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    return 1\n\n\nclass C:\n    def g(self):\n        x = 1\n        return x\n")
    assert function_lengths(module) == {"f": 2, "C.g": 3}


def test_no_tracked_file_holds_a_merge_conflict_marker():
    import subprocess

    root = SEAL.parent
    files = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    marked = []
    for name in files:
        path = root / name
        if path.suffix in (".py", ".md", ".yaml", ".toml", ".txt", ".cfg", "") and path.is_file():
            lines = path.read_text(errors="replace").splitlines()
            if any(line.startswith(("<<<<<<< ", ">>>>>>> ")) for line in lines):
                marked.append(name)
    assert marked == []


def layout_entries() -> dict[str, str]:
    """docs/development.md's Layout block: each path it opens a line with -> the text of its entry (continuation
    lines included)."""
    text = (SEAL.parent / "docs" / "development.md").read_text()
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    entries: dict[str, str] = {}
    path = None
    for line in block.splitlines():
        if line and not line[0].isspace():
            path, _, rest = line.partition(" ")
            entries[path] = rest
        elif path:
            entries[path] += " " + line.strip()
    return entries


def test_the_map_of_the_code_names_every_module_under_its_folder_and_no_other():
    entries = layout_entries()
    named = {path: set(re.findall(r"\b\w+\.py\b", text)) for path, text in entries.items()}
    missing, stale = [], []
    for root in (SEAL, EXPERIMENTS):
        for folder in [root, *(p for p in root.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
            modules = {p.name for p in folder.glob("*.py") if p.name != "__init__.py"}
            key = f"{folder.relative_to(SEAL.parent)}/"
            if folder == SEAL:  # seal/'s own modules each have a line of their own
                missing += sorted(f"seal/{m}" for m in modules if f"seal/{m}" not in entries)
            elif modules or any(folder.glob("*.json")):
                missing += [key] if key not in entries else sorted(f"{key}{m}" for m in modules - named[key])
                stale += sorted(f"{key}{m}" for m in named.get(key, set()) - modules)
    assert (missing, stale) == ([], [])
    # every entry is a path of the tree
    assert [path for path in entries if not (SEAL.parent / path).exists()] == []
    # the checker reads the block as a reader does: whole module names under their folder's entry
    assert "like_measured.py" in named["experiments/tables/"] and "seal/budget.py" in entries
    assert "memory.py" not in named["seal/env/benchmarks/"]  # bfcl_v4_memory.py is, which contains it
