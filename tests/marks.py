"""Parametrisations whose heavier cases wait for `make test-slow`."""

import pytest


def slow_except(values, default):
    """`values` as parameters, each marked slow unless it is one of `default` (those run in the default suite)."""
    return [v if v in default else pytest.param(v, marks=pytest.mark.slow) for v in values]
