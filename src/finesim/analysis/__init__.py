"""Analyses of model predictions (e.g. the CCL over-estimation count)."""
