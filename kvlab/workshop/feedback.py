"""What every workshop check shares: its result, a failed case's two levels of feedback (a hint
first, the worked arithmetic when the same hint is due for a changed answer), and calling the
learner's code so that a raise is reported, never a crash.
"""

from __future__ import annotations

import html
import inspect
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from types import CodeType, MethodType

from kvlab.core.checks import check_instance
from kvlab.notebook.tables import keep_whole

CHECK_MIME = "application/vnd.kvlab.workshop-check+json"
QUOTED_ID = r"'[^'\s]+'"  # a quoted request id ('new-a'), kept on one line in the HTML
NOT_YET = object()  # a case whose learner code raised NotImplementedError
HINTS_ONLY = (
    "hints only so far: if a case still fails the same way after you change your answer, "
    "the check shows its working (the arithmetic, the outcome, or the code to write); or "
    "call it with reveal=True"
)
SOME_HINTS_ONLY = (
    "the other cases show hints only so far: if one still fails the same way after you "
    "change your answer, the check shows its working too; or call it with reveal=True"
)


class CheckFailed(AssertionError):
    """A check failed under ``strict=True``; the message names the check and every failed case."""


@dataclass
class CheckResult:
    """What a check found: ``passed``, one feedback line per case (failures first), and whether
    the failure lines show the worked arithmetic (``revealed``) rather than hints."""

    check: str
    passed: bool
    lines: list[str] = field(default_factory=list)
    revealed: bool = False

    def __bool__(self) -> bool:
        return self.passed

    @property
    def headline(self) -> str:
        return f"{self.check}: {'PASSED' if self.passed else 'FAILED'}"

    def __str__(self) -> str:
        return "\n".join([self.headline] + [f"  {line}" for line in self.lines])

    def _repr_html_(self) -> str:
        colour, mark = ("#1a7f37", "&#10004;") if self.passed else ("#cf222e", "&#10008;")
        items = "".join(
            f"<li><code>{keep_whole(html.escape(line, quote=False), QUOTED_ID)}</code></li>"
            for line in self.lines
        )
        return (
            f'<div class="kvlab-check" style="border-left:4px solid {colour};padding-left:8px">'
            f'<b style="color:{colour}">{mark} {html.escape(self.headline)}</b><ul>{items}</ul></div>'
        )

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": str(self), "text/html": self._repr_html_(), CHECK_MIME: asdict(self)}


@dataclass(frozen=True)
class Hint:
    """A failed case's feedback: ``hint`` (what is wrong, not the answer), then ``reveal`` (the
    worked arithmetic) once the same hint is due for an answer changed since. ``part``: the part
    of the answer this case reads, where it is not the whole answer (only a change of it counts)."""

    hint: str
    reveal: str
    part: object = field(default=None, compare=False, hash=False)


#: per check, the hints shown in this kernel session and, per hint, the answer keys shown for
_HINTS_SHOWN: dict[str, dict[str, set[tuple]]] = {}


def _code_key(code: CodeType) -> tuple:
    consts = tuple(_code_key(c) if isinstance(c, CodeType) else repr(c) for c in code.co_consts)
    return (code.co_code, code.co_names, code.co_varnames, consts)


def answer_key(answer, depth: int = 0) -> tuple:
    """What the learner's answer is made of, to tell an edit (a comment's too) from running the
    check again: a function's code, source, defaults and closure; a container's items; an
    object's class methods and attributes."""
    if depth > 4:
        return (type(answer).__qualname__,)
    if isinstance(answer, (str, bytes, int, float, bool, type(None))):
        return (repr(answer),)
    if isinstance(answer, MethodType):
        return (answer_key(answer.__func__, depth + 1), answer_key(answer.__self__, depth + 1))
    code = getattr(answer, "__code__", None)
    if isinstance(code, CodeType):
        cells = []
        for cell in answer.__closure__ or ():
            try:
                cells.append(answer_key(cell.cell_contents, depth + 1))
            except ValueError:  # an empty cell
                cells.append(())
        try:
            source = inspect.getsource(answer)
        except (OSError, TypeError):
            source = ""
        return (_code_key(code), source, repr(getattr(answer, "__defaults__", None)), tuple(cells))
    if isinstance(answer, dict):  # at most 64 items each: a key, not a copy
        items = list(answer.items())[:64]
        return (len(answer),) + tuple((repr(k), answer_key(v, depth + 1)) for k, v in items)
    if isinstance(answer, (list, tuple)):
        return (len(answer),) + tuple(answer_key(v, depth + 1) for v in answer[:64])
    methods = tuple(
        (cls.__qualname__, name, _code_key(f.__code__))
        for cls in type(answer).__mro__
        for name, f in vars(cls).items()
        if isinstance(getattr(f, "__code__", None), CodeType)
    )
    attrs = sorted(getattr(answer, "__dict__", {}).items())
    return (methods, tuple((name, answer_key(v, depth + 1)) for name, v in attrs))


def reset_hints(check: str | None = None) -> None:
    """Forget the hints ``check`` (all checks if None) has shown: its next failure gives hints again."""
    if check is None:
        _HINTS_SHOWN.clear()
    else:
        _HINTS_SHOWN.pop(check, None)


def learner_name(fn) -> str:
    name = getattr(fn, "__name__", None)
    return name if name and "<" not in name else "your function"


class Passed(str):
    """A case's line when it passes; any other outcome of a case is its failure."""


def finish(check, outcomes, strict, reveal, answer, learner=None, cases=None) -> CheckResult:
    """The result of a check. ``outcomes``: per case a :class:`Passed` line, or its failure (a
    str, a :class:`Hint` or NOT_YET); ``answer``: what the learner gave, to tell an edit from a
    rerun; ``cases``: how many were checked, where one line stands for several. Every check
    ends here, so here its flags are checked: ``strict`` a bool, ``reveal`` a bool or None."""
    check_instance("strict", strict, bool)
    check_instance("reveal", reveal, (bool, type(None)))
    passes = [o for o in outcomes if isinstance(o, Passed)]
    failures = [o for o in outcomes if not isinstance(o, Passed)]
    if not failures:
        reset_hints(check)
        return CheckResult(check, True, [str(p) for p in passes])
    hints = [f for f in failures if isinstance(f, Hint)]
    shown = _HINTS_SHOWN.setdefault(check, {})
    keys = {f: answer_key(answer if f.part is None else f.part) for f in hints}
    if reveal is None:  # a hint due again for a changed answer shows its working
        revealed = {f for f in hints if shown.get(f.hint, set()) - {keys[f]}}
    else:
        revealed = set(hints) if reveal else set()
    not_yet = NOT_YET in failures
    lines = []
    if not_yet:
        lines.append(
            f"`{learner or learner_name(answer)}` is not implemented yet (it raised "
            "NotImplementedError): replace its `raise NotImplementedError` with your code, run "
            "that cell, then run this check again"
        )
    for f in failures:
        if isinstance(f, Hint):
            lines.append(f.reveal if f in revealed else f.hint)
        elif f is not NOT_YET:
            lines.append(f)
    if passes or not not_yet:
        total = cases or len(outcomes)
        lines.append(f"({len(passes)} of {total} {'case passes' if total == 1 else 'cases pass'})")
    if len(revealed) < len(hints):
        lines.append(SOME_HINTS_ONLY if revealed else HINTS_ONLY)
    for f in hints:
        shown.setdefault(f.hint, set()).add(keys[f])
    result = CheckResult(check, False, lines, revealed=bool(revealed))
    if strict:
        raise CheckFailed(str(result))
    return result


def call_learner(fn: Callable, *args, where: str = ""):
    """(value, None), or (None, the failure): NOT_YET if the learner's code raised
    NotImplementedError, else ``where`` and the words for the exception it raised."""
    try:
        return fn(*args), None
    except NotImplementedError:
        return None, NOT_YET
    except Exception as exc:  # the learner's code: report it, never crash the notebook
        return None, f"{where}raised {type(exc).__name__}: {exc}"
