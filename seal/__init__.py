"""seal: SEAL (co-evolution of tool-use agents and their training interface) on BFCL V3 multi-turn."""

__version__ = "0.1.0"
