"""The co-evolution RL loop: GRPO on TRL, diagnosis-guided advantage reweighting, interface evolution."""
