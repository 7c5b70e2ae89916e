import pytest

from seal.env.benchmark import CATEGORIES


@pytest.fixture(scope="session")
def oracle_policy():
    from seal.policy.oracle import OracleBackbone

    return OracleBackbone().load()


@pytest.fixture(scope="session")
def tiny_policy():
    from seal.policy.backbones import TinyRandomBackbone

    return TinyRandomBackbone().load()


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
