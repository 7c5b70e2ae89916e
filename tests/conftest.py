import inspect

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
