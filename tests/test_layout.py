"""The package order the README's Layout section describes: every import, at module level or inside a
function, points down the pipeline (io, errors < env < budget < diagnosis < interface < policy < eval <
report < rl < tasks)."""

import ast
from pathlib import Path

SEAL = Path(__file__).resolve().parents[1] / "seal"
ORDER = ["io", "errors", "env", "budget", "diagnosis", "interface", "policy", "eval", "report", "rl", "tasks"]
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
