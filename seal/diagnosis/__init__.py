"""Diagnosis Psi: two labels per turn (outcome, cause) from executable evidence, and their statistics."""

from seal.diagnosis.diagnosers import ConstantDiagnoser, NoDiagnoser, RandomDiagnoser, RuleDiagnoser
from seal.diagnosis.labels import (
    CAUSE_FAILURES,
    CAUSES,
    COUNTED,
    COUNTED_LABELS,
    COUNTED_OUTCOMES,
    LABELS,
    LAYERS,
    OUTCOME_FAILURES,
    OUTCOMES,
    TABLE5_TO_CAUSES,
    TABLE6_TO_OUTCOMES,
    TurnLabel,
    check_labels,
    check_layer,
    check_rho_keys,
    profile_labels,
    table5_cause,
)
from seal.diagnosis.profile import FailureProfile, round_profiles, trajectory_profile
from seal.diagnosis.rules import diagnose, diagnose_episode, diagnose_result

__all__ = [
    "CAUSES",
    "CAUSE_FAILURES",
    "COUNTED",
    "COUNTED_LABELS",
    "COUNTED_OUTCOMES",
    "LABELS",
    "LAYERS",
    "OUTCOMES",
    "OUTCOME_FAILURES",
    "TABLE5_TO_CAUSES",
    "TABLE6_TO_OUTCOMES",
    "ConstantDiagnoser",
    "FailureProfile",
    "NoDiagnoser",
    "RandomDiagnoser",
    "RuleDiagnoser",
    "TurnLabel",
    "check_labels",
    "check_layer",
    "check_rho_keys",
    "diagnose",
    "diagnose_episode",
    "diagnose_result",
    "profile_labels",
    "round_profiles",
    "table5_cause",
    "trajectory_profile",
]
