"""Operator tooling: explain, review, reports, rule tests and evaluation, demo."""
