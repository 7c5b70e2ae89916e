"""Diagnosis Psi: turn-level failure labels from executable evidence, and their statistics."""

from seal.diagnosis.diagnosers import ConstantDiagnoser, NoDiagnoser, RandomDiagnoser, RuleDiagnoser
from seal.diagnosis.labels import (
    FAILURE_LABELS,
    LABELS,
    TABLE5_TO_LABELS,
    TABLE6_TO_LABELS,
    WEIGHTED_LABELS,
    check_labels,
    check_rho_keys,
    table5_label,
)
from seal.diagnosis.profile import FailureProfile, trajectory_profile
from seal.diagnosis.rules import diagnose, diagnose_episode

__all__ = [
    "FAILURE_LABELS",
    "LABELS",
    "TABLE5_TO_LABELS",
    "TABLE6_TO_LABELS",
    "WEIGHTED_LABELS",
    "ConstantDiagnoser",
    "FailureProfile",
    "NoDiagnoser",
    "RandomDiagnoser",
    "RuleDiagnoser",
    "check_labels",
    "check_rho_keys",
    "diagnose",
    "diagnose_episode",
    "table5_label",
    "trajectory_profile",
]
