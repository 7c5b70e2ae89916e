import functools

import pytest

from seal.env.benchmarks.bfcl_v3 import CATEGORIES


# Built once per process, not once per session: `make mutate` runs every mutant's tests as a new
# pytest session in a process forked from the one that ran them all, which then hands these over
# instead of loading a tokenizer and a model again per mutant.
@functools.cache
def _policy(name: str):
    from seal.policy.backbones import TinyRandomBackbone
    from seal.policy.oracle import OracleBackbone

    return {"oracle": OracleBackbone, "tiny": TinyRandomBackbone}[name]().load()


@pytest.fixture(scope="session")
def oracle_policy():
    return _policy("oracle")


@pytest.fixture(scope="session")
def tiny_policy():
    return _policy("tiny")


@pytest.fixture(scope="session")
def short_entries(bench):
    """Two entries of each category with the shortest prompts (cheap to play with a model)."""
    from seal.policy.formats import get_format

    fmt = get_format("qwen_xml")
    size = {e.id: len(fmt.system_prompt(e.functions)) for e in bench.values()}
    out = []
    for category in CATEGORIES:
        ids = sorted((e for e in bench.values() if e.category == category), key=lambda e: size[e.id])
        out += ids[:2]
    return out


@pytest.fixture(scope="session")
def spread_entries(bench):
    """Ten entries of each category spread over the scenarios (40 in all)."""
    return [bench[f"multi_turn_{c}_{i}"] for c in CATEGORIES for i in range(0, 200, 20)]
