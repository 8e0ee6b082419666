"""Deterministic: lines to facts, the Rete, incidents, policy, plans, replay."""
