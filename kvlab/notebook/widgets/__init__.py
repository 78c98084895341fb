"""Each notebook's live panel (being split, one module a panel)."""

from kvlab.notebook.widgets.admission import *  # noqa: F401,F403
