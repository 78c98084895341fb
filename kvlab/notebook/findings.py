"""What a notebook established: ``report_findings([...])`` shows a table and leaves a JSON
output that :func:`read_findings` collects, so ``kvlab walkthrough`` summarises every notebook
without running it again."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from kvlab.core.checks import check_instance, check_items
from kvlab.notebook.tables import table

FINDINGS_MIME = "application/vnd.kvlab.notebook.findings+json"


@dataclass(frozen=True)
class Finding:
    """One established fact: a scenario under a policy, its outcome and the numbers behind it."""

    scenario: str
    policy: str
    outcome: str  # one of kvlab's outcome names: "crash", "stall", "reject", "ok", ...
    numbers: str  # the arithmetic, in words

    def __post_init__(self):
        for name in ("scenario", "policy", "outcome", "numbers"):
            check_instance(name, getattr(self, name), str)


def report_findings(findings: Iterable[Finding]):
    """Display the findings (HTML table + machine-readable JSON) and return them as dicts."""
    rows = [
        asdict(check_instance(f"findings[{i}]", finding, Finding))
        for i, finding in enumerate(check_items("findings", findings, "Findings"))
    ]
    from IPython.display import display  # imported here: kvlab itself needs no IPython

    shown = table(rows).hide(axis="index").to_html() if rows else "<p>(no findings)</p>"
    plain = "\n".join(" | ".join(str(v) for v in r.values()) for r in rows)
    display({FINDINGS_MIME: rows, "text/html": shown, "text/plain": plain}, raw=True)
    return rows


def read_findings(notebook) -> list[dict]:
    """The findings a notebook (an nbformat NotebookNode) reported, in order."""
    found = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            found.extend(output.get("data", {}).get(FINDINGS_MIME, []))
    return found
