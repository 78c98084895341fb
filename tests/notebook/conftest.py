"""Notebook fixtures shared by more than one test module (executed once per session)."""

from __future__ import annotations

import pytest

from kvlab.core.paths import NOTEBOOK_DIR


@pytest.fixture(scope="session")
def nb06(tmp_path_factory):
    """Notebook 06 at its defaults with SMOKE on: (executed notebook, seconds)."""
    from notebook_runner import execute

    return execute(NOTEBOOK_DIR / "06_your_deployment.ipynb", tmp_path_factory.mktemp("nb06"))
