"""Where the repository's files live: ``data/`` (scenarios, traces, measurements) and
``notebooks/``, found from this file, so that an editable install (``pip install -e .``) finds
them in the checkout. A wheel carries none of them."""

from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
DATA_DIR = REPOSITORY / "data"
NOTEBOOK_DIR = REPOSITORY / "notebooks"

__all__ = ["DATA_DIR", "NOTEBOOK_DIR", "REPOSITORY"]
