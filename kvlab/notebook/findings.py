"""Findings: what a notebook established, shown to the reader and readable by the walkthrough.

A notebook ends with ``report_findings([...])``. In Jupyter it renders a table; in the executed
notebook it also leaves a ``application/vnd.kvlab.notebook.findings+json`` output that
``read_findings`` collects, so ``kvlab walkthrough`` can print a summary of every notebook
without re-running anything.
"""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass
from typing import Iterable, List

FINDINGS_MIME = "application/vnd.kvlab.notebook.findings+json"


@dataclass(frozen=True)
class Finding:
    """One established fact: a scenario under a policy, its outcome and the numbers behind it."""

    scenario: str
    policy: str
    outcome: str  # one of kvlab's outcome names: "crash", "stall", "reject", "ok", ...
    numbers: str  # the arithmetic, in words


def report_findings(findings: Iterable[Finding]):
    """Display the findings (HTML table + machine-readable JSON) and return them as dicts."""
    rows = [asdict(f) for f in findings]
    from IPython.display import display  # imported here: kvlab itself needs no IPython

    head = "".join(f"<th>{k}</th>" for k in ("scenario", "policy", "outcome", "numbers"))
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(r[k]))}</td>" for k in r) + "</tr>"
                   for r in rows)
    display({FINDINGS_MIME: rows, "text/html": f"<table><tr>{head}</tr>{body}</table>",
             "text/plain": "\n".join(" | ".join(str(v) for v in r.values()) for r in rows)},
            raw=True)
    return rows


def read_findings(notebook) -> List[dict]:
    """The findings a notebook (an nbformat NotebookNode) reported, in order."""
    found = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if FINDINGS_MIME in data:
                found.extend(data[FINDINGS_MIME])
    return found
