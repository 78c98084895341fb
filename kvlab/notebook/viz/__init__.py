"""Figures: pure functions from kvlab results to plotly figures (being split by what they show)."""

from kvlab.notebook.viz.pages import *  # noqa: F401,F403
