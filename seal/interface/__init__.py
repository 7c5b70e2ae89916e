"""The training-time learning interface Omega: what the learner is shown around the unchanged benchmark.

Evaluation always uses PLAIN; apply(omega) with every component off is PLAIN itself.
"""

from seal.interface.omega import (
    GUIDELINES,
    MODES,
    SWITCHES,
    InterfaceConfig,
    Omega,
    evolve,
    initial_interface,
    omega_diff,
    signals,
    widest_interface,
)
from seal.interface.render import InterfaceView, apply, error_hint
from seal.interface.view import PLAIN, PlainView, View

__all__ = [
    "GUIDELINES",
    "MODES",
    "PLAIN",
    "SWITCHES",
    "InterfaceConfig",
    "InterfaceView",
    "Omega",
    "PlainView",
    "View",
    "apply",
    "error_hint",
    "evolve",
    "initial_interface",
    "omega_diff",
    "signals",
    "widest_interface",
]
