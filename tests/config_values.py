"""Values the tests take from conf/ rather than copying them (tests/test_configs.py checks them
against the paper)."""

from pathlib import Path

from omegaconf import OmegaConf

CONF = Path(__file__).resolve().parents[1] / "conf"

# rho0 per outcome tag, as the closed_loop reweighting (and every variant, by inheritance) sets it
RHO0 = {str(k): float(v) for k, v in OmegaConf.load(CONF / "reweighting" / "closed_loop.yaml").rho0.items()}


def backbone_cfg(name: str):
    """conf/backbone/<name>.yaml as Hydra composes it (with the base it inherits from), detached."""
    from tests.test_configs import compose_with

    node = compose_with(f"backbone={name}").backbone
    return OmegaConf.create(OmegaConf.to_container(node))
