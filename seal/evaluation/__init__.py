"""Evaluation of a backbone: BFCL V3 multi-turn (evaluate.py) and the out-of-domain benchmarks (out_of_domain.py)."""
