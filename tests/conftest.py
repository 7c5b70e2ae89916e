import inspect
import json
import os
from pathlib import Path

import pytest

from seal.env import load_benchmark
from seal.env.executor import Backends


@pytest.fixture(scope="session")
def bench():
    return load_benchmark()


@pytest.fixture(scope="session")
def signatures(bench):
    """Parameter names of all 128 backend methods."""
    names = {}
    for entry in bench.values():
        backends = Backends(entry.involved_classes, entry.initial_config, long_context=False)
        for name, method in backends.methods.items():
            names[name] = list(inspect.signature(method).parameters)
    return names


def pytest_collection_modifyitems(config, items):
    """Under `make mutate`, a mutant's tests run quickest first (by the times mutmut measured in its stats run):
    mutmut stops at the first failure (-x) and hands the tests over in no set order, so a mutant a quick test kills
    would otherwise often wait for a costly one first. Ordinary runs keep the files' order."""
    if "__mutmut_" not in os.environ.get("MUTANT_UNDER_TEST", ""):
        return
    stats = Path("mutmut-stats.json")  # mutmut runs the tests from mutants/, where it keeps its stats
    if stats.exists():
        seconds = json.loads(stats.read_text()).get("duration_by_test", {})
        items.sort(key=lambda item: seconds.get(item.nodeid, 0.0))
