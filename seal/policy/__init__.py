"""The policy side: backbones (where weights come from), tool-call formats, and the rollout engine."""

from seal.policy.backbones import HFBackbone, Policy, TinyRandomBackbone
from seal.policy.formats import Parsed, ToolFormat, get_format
from seal.policy.oracle import OracleBackbone
from seal.policy.rollout import EpisodeRollout, RolloutEngine

__all__ = [
    "EpisodeRollout",
    "HFBackbone",
    "OracleBackbone",
    "Parsed",
    "Policy",
    "RolloutEngine",
    "TinyRandomBackbone",
    "ToolFormat",
    "get_format",
]
