"""Analyses: what the runs mean, in closed form and in tables (docs/DESIGN.md maps the modules)."""
