"""How kvlab's own text writes a count and the article before a number: "1 page", "2,050
slots", "an 8,192-token context". Messages kvlab copies from an engine stay as the engine writes
them."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun`` agreeing: "1 pass", "2 passes", "1,072 requests"."""
    if n == 1:
        return f"1 {noun}"
    return (
        f"{n:,} {plural or (noun + 'es' if noun.endswith(('s', 'sh', 'ch', 'x')) else noun + 's')}"
    )


def a_or_an(number: str) -> str:
    """The article before ``number`` (as written, e.g. "8,192" or "11.31") read aloud: "an" for
    eight..., eleven... and eighteen... ("an 8,192-token context", "an 11.31 MiB pool"), else "a"."""
    lead = number.split(",")[0].split(".")[0]
    return "an" if lead.startswith("8") or lead in ("11", "18") else "a"


__all__ = ["a_or_an", "counted"]
