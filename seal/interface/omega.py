"""Omega_t, the training-time learning interface, and its update rule Omega_{t+1} = Evolve(Omega_t, C_t).

Omega has three components (paper section 3.3, learning-interface evolution): phi_schema (tool-affordance cues in the schemas),
phi_err (class-level recovery hints after failed calls) and phi_cap (a set of behavioural
guidelines in the system prompt). `evolve` switches each one on or off from the *aggregate* failure
profile of the round in the **cause** layer (paper Table 5 and the project's causes; the outcome
tags drive only the weights), by failure type and never by instance: a component's signal is the
summed prevalence of the causes that trigger it; it switches on at `on` and off below `off` (hysteresis),
and only when the round has at least `min_evidence` labelled turns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from seal.diagnosis import labels as L
from seal.diagnosis.profile import FailureProfile

MODES = ("off", "always", "evolve")
# The paper's five capability guidelines (the names; the sentences shown are the project's, seal.interface.render),
# in the order they are shown
GUIDELINES = ("cautious_call", "active_respond", "state_aware", "scope", "format")
COMPONENTS = ("schema", "err", "cap")
SCHEMA_STYLES = ("project", "release")

# Which causes argue for which switch (the paper: argument_mismatch -> schema/constraint cues,
# missing_tool_call -> affordance cues, recovery_failure -> structured error feedback; each
# guideline answers one failure type). inherited_state triggers nothing: the turn it marks did
# the right thing, and the turn that broke the state carries its own cause.
DEFAULT_TRIGGERS: dict[str, tuple[str, ...]] = {
    "schema": (L.ARGUMENT_MISMATCH, L.MISSING_TOOL_CALL, L.INVALID_TOOL_CALL),
    "err": (L.RECOVERY_FAILURE, L.INVALID_TOOL_CALL),
    "cap/cautious_call": (L.SPURIOUS_TOOL_CALL,),
    "cap/active_respond": (L.EMPTY_TURN, L.MISSING_TOOL_CALL),
    "cap/state_aware": (L.STATE_MISMATCH,),
    "cap/scope": (L.VALUE_MISMATCH,),
    "cap/format": (L.RESPONSE_MISMATCH,),
}
SWITCHES = tuple(DEFAULT_TRIGGERS)


def _plain(value: Any) -> Any:
    """Hydra hands nested config values over as DictConfig/ListConfig; keep plain Python."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(value, (DictConfig, ListConfig)):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return value


def _mode(value: Any, component: str) -> str:
    if value is False:  # YAML reads an unquoted off as a boolean
        return "off"
    if value not in MODES:
        raise ValueError(
            f"env_interface.{component}={value!r} is not a mode; use one of off, always, evolve "
            "(write \"off\" in quotes in YAML)"
        )
    return value


@dataclass
class InterfaceConfig:
    """conf/env_interface/*.yaml: which components exist and how they evolve."""

    name: str = "static"
    # each component: "off" (never shown), "always" (shown from round 0, never changes) or
    # "evolve" (off until the failure profile switches it on)
    schema: str = "off"
    err: str = "off"
    cap: str = "off"
    # a switch turns on when its signal (summed prevalence of its trigger labels) reaches `on` ...
    on_threshold: float = 0.10
    # ... and off again only when the signal drops below `off` (hysteresis; off <= on)
    off_threshold: float = 0.05
    # no switch moves on a round with fewer labelled (weighted) turns than this; small because a
    # CPU smoke round has about 2 episodes x 3-5 turns, paper rounds have thousands of turns
    min_evidence: int = 4
    # per-switch overrides, e.g. {"cap/format": {"on": 0.2, "off": 0.1}}
    thresholds: dict[str, dict[str, float]] = field(default_factory=dict)
    # switch -> causes whose prevalence it answers (defaults: DEFAULT_TRIGGERS)
    triggers: dict[str, list[str]] = field(default_factory=dict)
    # the guidelines phi_cap may use
    guidelines: list[str] = field(default_factory=lambda: list(GUIDELINES))
    # phi_schema's annotation style: "project" or "release" (seal/interface/render.py explains both)
    schema_style: str = "project"
    # phi_schema's system-prompt note (null: the style's own wording)
    schema_note: str | None = None

    def __post_init__(self) -> None:
        for component in COMPONENTS:
            setattr(self, component, _mode(getattr(self, component), component))
        self.thresholds = {str(k): dict(v) for k, v in dict(_plain(self.thresholds) or {}).items()}
        triggers = {k: list(v) for k, v in DEFAULT_TRIGGERS.items()}
        triggers.update({str(k): list(v) for k, v in dict(_plain(self.triggers) or {}).items()})
        self.triggers = triggers
        self.guidelines = list(_plain(self.guidelines))
        unknown = sorted((set(self.thresholds) | set(self.triggers)) - set(SWITCHES))
        if unknown:
            raise ValueError(
                f"unknown interface switch(es) {', '.join(unknown)}; switches are {', '.join(SWITCHES)}"
            )
        bad = sorted(set(self.guidelines) - set(GUIDELINES))
        if bad:
            raise ValueError(f"unknown guideline(s) {', '.join(bad)}; guidelines are {', '.join(GUIDELINES)}")
        for switch, labels in self.triggers.items():
            L.check_labels(labels, L.COUNTED["cause"], what=f"trigger cause of {switch}")
        for switch in SWITCHES:
            on, off = self.threshold(switch)
            if not 0.0 <= off <= on <= 1.0:
                raise ValueError(
                    f"{switch}: need 0 <= off <= on <= 1 for the thresholds, got on={on}, off={off}"
                )
        if self.schema_style not in SCHEMA_STYLES:
            raise ValueError(
                f"schema_style={self.schema_style!r}: choose one of {', '.join(SCHEMA_STYLES)} (rendering=...)"
            )
        if self.min_evidence < 0:
            raise ValueError(f"min_evidence must be >= 0, got {self.min_evidence}")

    def threshold(self, switch: str) -> tuple[float, float]:
        own = self.thresholds.get(switch, {})
        return float(own.get("on", self.on_threshold)), float(own.get("off", self.off_threshold))

    def mode_of(self, switch: str) -> str:
        component, _, guideline = switch.partition("/")
        if component == "cap" and guideline not in self.guidelines:
            return "off"
        return getattr(self, component)


@dataclass(frozen=True)
class Omega:
    """The interface state of one round. Immutable; `evolve` returns a new one."""

    phi_schema: bool = False
    phi_err: bool = False
    phi_cap: frozenset[str] = frozenset()
    # increments whenever a switch changes
    version: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "phi_cap", frozenset(self.phi_cap))
        bad = sorted(self.phi_cap - set(GUIDELINES))
        if bad:
            raise ValueError(f"unknown guideline(s) {', '.join(bad)}; guidelines are {', '.join(GUIDELINES)}")

    @property
    def active(self) -> bool:
        return self.phi_schema or self.phi_err or bool(self.phi_cap)

    def switches(self) -> dict[str, bool]:
        out = {"schema": self.phi_schema, "err": self.phi_err}
        out.update({f"cap/{g}": g in self.phi_cap for g in GUIDELINES})
        return out

    def metrics(self) -> dict[str, float]:
        """Flat, namespaced numbers for the logger: iface/<switch> is 1.0 when on."""
        out = {f"iface/{k}": float(v) for k, v in self.switches().items()}
        out["iface/version"] = float(self.version)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "phi_schema": self.phi_schema,
            "phi_err": self.phi_err,
            "phi_cap": [g for g in GUIDELINES if g in self.phi_cap],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Omega:
        cap = frozenset(d.get("phi_cap", ()))
        return cls(bool(d["phi_schema"]), bool(d["phi_err"]), cap, int(d["version"]))

    @classmethod
    def from_switches(cls, switches: Mapping[str, bool], version: int) -> Omega:
        cap = frozenset(g for g in GUIDELINES if switches.get(f"cap/{g}"))
        return cls(bool(switches["schema"]), bool(switches["err"]), cap, version)


def initial_interface(cfg: InterfaceConfig) -> Omega:
    """Omega_0: "always" components on, everything else off until the failure profile asks for it."""
    switches = {s: cfg.mode_of(s) == "always" for s in SWITCHES}
    return Omega.from_switches(switches, version=0)


def widest_interface(cfg: InterfaceConfig) -> Omega:
    """Every component the config can ever switch on, on: the longest prompts a run can show."""
    return Omega.from_switches({s: cfg.mode_of(s) != "off" for s in SWITCHES}, version=0)


def signals(profile: FailureProfile, cfg: InterfaceConfig) -> dict[str, float]:
    """Each switch's evidence: the summed prevalence of its trigger causes in the cause-layer profile."""
    return {s: sum(profile.prevalence.get(label, 0.0) for label in cfg.triggers[s]) for s in SWITCHES}


def evolve(omega: Omega, profile: FailureProfile, cfg: InterfaceConfig) -> Omega:
    """Omega_{t+1} from Omega_t and the round's cause-layer failure profile C_t (a new object)."""
    current = omega.switches()
    new = dict(current)
    evidence = profile.num_turns >= cfg.min_evidence
    strength = signals(profile, cfg)
    for switch in SWITCHES:
        mode = cfg.mode_of(switch)
        if mode != "evolve":
            new[switch] = mode == "always"
            continue
        if not evidence:
            continue
        on, off = cfg.threshold(switch)
        if not current[switch] and strength[switch] >= on:
            new[switch] = True
        elif current[switch] and strength[switch] < off:
            new[switch] = False  # pragma: no mutate (read through bool())
    changed = new != current
    return Omega.from_switches(new, omega.version + 1 if changed else omega.version)


def omega_diff(old: Omega, new: Omega) -> str:
    """Readable changes between two interface states ("" when equal)."""
    lines = []
    before, after = old.switches(), new.switches()
    for switch in SWITCHES:
        if before[switch] != after[switch]:
            was, now = ("on" if before[switch] else "off"), ("on" if after[switch] else "off")
            lines.append(f"{switch}: {was} -> {now}")
    if old.version != new.version:
        lines.append(f"version: {old.version} -> {new.version}")
    return "\n".join(lines)


def replace(omega: Omega, **changes: Any) -> Omega:
    return dataclasses.replace(omega, **changes)
