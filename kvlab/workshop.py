"""Checks for the workshop exercises (notebooks/workshop/), with feedback that says what is wrong.

One check per exercise; each calls the learner's code on a set of cases, compares it with kvlab's
own answer, and returns a :class:`CheckResult` (it displays as a green or red list in Jupyter).
A check never raises on a wrong answer unless ``strict=True``; then it raises :class:`CheckFailed`
naming the check, which is how the tests prove that starter code fails and solutions pass.

Hint, then reveal. The first failed run of a check gives, per failed case, what is wrong and a
hint that does not give the answer away (a question, the slip's name); if the same check fails
again in the same kernel session, it shows the worked arithmetic (the formula with the case's
numbers). The count is per check, in this module (``reset_hints()`` starts it over; a pass
resets it too); a run that only says "not implemented yet" does not count. ``reveal=True`` shows
the arithmetic at once, ``reveal=False`` keeps to hints.

A learner's function that still raises ``NotImplementedError`` is reported once, in one line
naming the function, not once per case.

====  =====================================  ======================================================
 ex.  check                                  mirrors
====  =====================================  ======================================================
 1    ``check_page_index_width(fn, seed)``   ``max_blocks_per_seq`` of ``KVCacheManagerV2.__init__``
                                             (kvlab/core/page_index.py; docs/REFERENCE.md §2)
 2    ``check_predictions(dict)``,           native ``KvCache::resize`` check order: the row is
      ``check_trigger(fn)``                  checked before the pool (kvlab/core/kv_cache.py; §3)
 3    ``check_admission(classify)``,         PR #21720's per-request feasibility
      ``check_admission_policy(policy)``     (kvlab/sched/admission.py ``CapacityAdmission``; §4)
 4    ``check_resident_scan(fn)``            the phase-2 loop of ``KVCacheV2Scheduler`` in PR
                                             #17261 (scheduler_v2.py, the resident-sequence cap;
                                             §5): ``break`` where ``continue`` belongs
====  =====================================  ======================================================

Exercise 4 is self-contained here: :func:`schedule_pending_contexts_buggy` is the PR's loop,
reduced to the cap (notebook 05 runs the same bug on kvlab's Scheduler, as
``kvlab.case_studies.BreakOnCapScheduler``).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Optional, Sequence

from kvlab.analysis.presets import RESIZE_OUTCOMES, seed_geometry
from kvlab.analysis.repro import MIB, run_repro
from kvlab.core.arith import div_ceil
from kvlab.core.kv_cache import PAGE_INDEX_TOO_SHORT_MESSAGE, PageIndexTooShort
from kvlab.core.manager import KVCacheManager
from kvlab.core.page_index import max_blocks_per_seq
from kvlab.core.request import Request
from kvlab.sched.admission import (AdmissionPolicy, CapacityAdmission, FITS_NOW, NEVER_FITS,
                                   TEMPORARILY_BLOCKED, demand_blocks)

CHECK_MIME = "application/vnd.kvlab.workshop-check+json"


# --- the result of a check ------------------------------------------------------------------------

class CheckFailed(AssertionError):
    """A check failed under ``strict=True``; the message names the check and every failed case."""


@dataclass
class CheckResult:
    """What a check found: ``passed`` and one feedback line per case (failures first).
    ``revealed``: the failure lines show the worked arithmetic, not only hints."""

    check: str
    passed: bool
    lines: List[str] = field(default_factory=list)
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
        items = "".join(f"<li><code>{html.escape(line)}</code></li>" for line in self.lines)
        return (f'<div class="kvlab-check" style="border-left:4px solid {colour};padding-left:8px">'
                f'<b style="color:{colour}">{mark} {html.escape(self.headline)}</b><ul>{items}</ul></div>')

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": str(self), "text/html": self._repr_html_(),
                CHECK_MIME: {"check": self.check, "passed": self.passed, "lines": self.lines,
                             "revealed": self.revealed}}

    def raise_if_failed(self) -> "CheckResult":
        if not self.passed:
            raise CheckFailed(str(self))
        return self


@dataclass(frozen=True)
class _Hint:
    """A failed case's feedback at two levels: ``hint`` on a check's first failed run (what is
    wrong, without the answer), ``reveal`` from its second on (the worked arithmetic)."""

    hint: str
    reveal: str


#: failed runs with hints, per check, in this kernel session (the second one reveals)
_FAILED_RUNS: Dict[str, int] = {}


class _NotYet:
    """The marker of a case whose learner code raised NotImplementedError."""

    def __repr__(self) -> str:
        return "NOT_YET"


NOT_YET = _NotYet()
HINTS_ONLY = ("hints only so far: if this check fails again, it shows the worked arithmetic "
              "(or call it with reveal=True)")


def reset_hints(check: Optional[str] = None) -> None:
    """Forget the failed runs of ``check`` (all checks if None): its next failure gives hints again."""
    if check is None:
        _FAILED_RUNS.clear()
    else:
        _FAILED_RUNS.pop(check, None)


def _not_yet_line(learner: str) -> str:
    return (f"`{learner}` is not implemented yet (it raised NotImplementedError): replace its "
            "`raise NotImplementedError` with your code, run that cell, then run this check again")


def _learner_name(fn) -> str:
    name = getattr(fn, "__name__", None)
    return name if name and "<" not in name else "your function"


def _finish(check: str, failures: list, passes: List[str], strict: bool, *,
            reveal: Optional[bool] = None, learner: str = "your function",
            cases: Optional[int] = None) -> CheckResult:
    """The result of a check. ``failures``: a line per failed case, a str (the same at both
    levels), a :class:`_Hint`, or ``NOT_YET`` (the learner's code raised NotImplementedError:
    all of those become one line). ``cases``: how many cases were checked, where one failure
    line stands for several."""
    not_yet = [f for f in failures if f is NOT_YET]
    others = [f for f in failures if f is not NOT_YET]
    hinted = any(isinstance(f, _Hint) for f in others)
    if reveal is None:
        reveal = _FAILED_RUNS.get(check, 0) >= 1
    lines = [_not_yet_line(learner)] if not_yet else []
    lines += [(f.reveal if reveal else f.hint) if isinstance(f, _Hint) else f for f in others]
    if failures and (passes or not not_yet):
        lines.append(f"({len(passes)} of {cases or len(passes) + len(failures)} cases pass)")
    if hinted and not reveal:
        lines.append(HINTS_ONLY)
    if not failures:
        lines = list(passes)
        reset_hints(check)
    elif hinted:
        _FAILED_RUNS[check] = _FAILED_RUNS.get(check, 0) + 1
    result = CheckResult(check, not failures, lines, revealed=bool(reveal and hinted))
    return result.raise_if_failed() if strict else result


def _call(fn: Callable, *args):
    """(value, None), (None, NOT_YET) if the learner's code raised NotImplementedError, or
    (None, words for the exception it raised)."""
    try:
        return fn(*args), None
    except NotImplementedError:
        return None, NOT_YET
    except Exception as exc:  # the learner's code: report it, never crash the notebook
        return None, f"raised {type(exc).__name__}: {exc}"


# --- exercise 1: the page-index width ------------------------------------------------------------

#: (label, max_seq_len, tokens_per_block, extra, draft)
WIDTH_CASES = [
    ("the seed, clamped row", 2048, 32, 0, 0),
    ("the seed, configured row (the one-line fix)", 8192, 32, 0, 0),
    ("just under a block boundary", 2047, 32, 0, 0),
    ("a tiny sequence", 31, 32, 0, 0),
    ("a partly filled last page", 2057, 32, 0, 0),
    ("16-token pages", 100, 16, 0, 0),
    ("64-token pages", 4096, 64, 0, 0),
    ("extra KV tokens", 2000, 32, 100, 0),
    ("draft tokens", 2000, 32, 0, 100),
]

SEED_POOL_BYTES = 4 * MIB
SEED_MAX_SEQ_LEN = 8192


def _width_mistakes(L: int, t: int, e: int, d: int, expected: int) -> List[tuple]:
    """(value a typical mistake gives, the slip's name (the hint), the worked numbers (the
    reveal)). Ordered: the first match is the one shown."""
    raw = div_ceil(L + e + d + 1, t)
    up4 = lambda n: div_ceil(n, 4) * 4  # noqa: E731
    no_one = div_ceil(L + e + d, t)
    return [
        (up4(no_one), "you forgot the +1 decode token",
         f": ceil(({L}+{e}+{d})/{t})={no_one} -> {up4(no_one)}, expected "
         f"ceil(({L}+{e}+{d}+1)/{t})={raw} -> {expected}"),
        (raw, "you did not round up to a multiple of 4 (the copy_block_offsets kernel)",
         f": ceil(({L}+{e}+{d}+1)/{t})={raw}, rounded up to a multiple of 4 = {expected}"),
        (no_one, "you forgot both the +1 decode token and the rounding up to a multiple of 4",
         f": ceil(({L}+{e}+{d}+1)/{t})={raw} -> {expected}"),
        (div_ceil(raw, 8) * 8, "you rounded up to a multiple of 8; the row is padded to a multiple of 4",
         f": {raw} -> {expected}"),
        (up4((L + e + d + 1) // t), "you rounded the division down: a partly filled block still "
         "needs an entry", f", so ceil(({L}+{e}+{d}+1)/{t})={raw} -> {expected}"),
        (up4(div_ceil(L + d + 1, t)), f"you left out the extra KV tokens ({e})",
         f": ceil(({L}+{e}+{d}+1)/{t})={raw} -> {expected}"),
        (up4(div_ceil(L + e + 1, t)), f"you left out the draft tokens ({d})",
         f": ceil(({L}+{e}+{d}+1)/{t})={raw} -> {expected}"),
    ]


def _width_case(fn, label, L, t, e, d, slip: Optional[int]):
    """None if fn is right on this case, else its feedback (a str, a _Hint or NOT_YET).
    ``slip``: the index of the mistake in ``_width_mistakes`` that explains every case, if one does."""
    expected = max_blocks_per_seq(L, t, e, d)
    call = f"page_index_width({L}, {t}, {e}, {d})"
    got, error = _call(fn, L, t, e, d)
    if error is NOT_YET:
        return NOT_YET
    if error:
        return f"{label}: {call} {error}"
    if isinstance(got, bool) or not isinstance(got, int):
        return f"{label}: {call} returned {got!r} ({type(got).__name__}); return an int number of entries"
    if got == expected:
        return None
    mistakes = _width_mistakes(L, t, e, d, expected)
    if slip is not None:
        mistakes = [mistakes[slip]] + mistakes
    name, worked = next(((n, w) for value, n, w in mistakes if value == got),
                        ("none of the usual slips gives this: check each of Part 1's three rules",
                         f"; expected round_up_to_multiple_of_4(ceil(({L}+{e}+{d}+1)/{t})) = {expected}"))
    head = f"{label}: {call} returned {got}, expected {expected} - {name}"
    return _Hint(head, head + worked)


def _width_slip(fn) -> Optional[int]:
    """The one typical mistake that gives fn's answer on every case, if there is one."""
    answers = [_call(fn, L, t, e, d)[0] for _, L, t, e, d in WIDTH_CASES]
    tables = [[m[0] for m in _width_mistakes(L, t, e, d, max_blocks_per_seq(L, t, e, d))]
              for _, L, t, e, d in WIDTH_CASES]
    for k in range(len(tables[0])):
        if all(table[k] == answer for table, answer in zip(tables, answers)):
            return k
    return None


def check_page_index_width(fn: Callable[[int, int, int, int], int],
                           seed_max_seq_len: Optional[Dict[str, Optional[int]]] = None, *,
                           strict: bool = False, reveal: Optional[bool] = None) -> CheckResult:
    """Exercise 1: ``fn(max_seq_len, tokens_per_block, extra, draft)`` against kvlab's
    ``max_blocks_per_seq`` on WIDTH_CASES; with ``seed_max_seq_len`` ({"clamped": ..,
    "configured": ..}: the max_seq_len each width policy feeds in for the seed's 4 MiB pool),
    also the seed's 68 and 260. ``reveal``: see the module docstring (hint, then reveal)."""
    failures, passes = [], []
    slip = _width_slip(fn)
    for label, L, t, e, d in WIDTH_CASES:
        line = _width_case(fn, label, L, t, e, d, slip)
        if line:
            failures.append(line)
        else:
            passes.append(f"{label}: page_index_width({L}, {t}, {e}, {d}) = {max_blocks_per_seq(L, t, e, d)}")
    if seed_max_seq_len is not None:
        geo = seed_geometry()
        blocks = SEED_POOL_BYTES // geo.bytes_per_block
        clamped = blocks * geo.tokens_per_block
        why = (f"4 MiB / {geo.bytes_per_token} B per token = {SEED_POOL_BYTES // geo.bytes_per_token} "
               f"tokens = {blocks} blocks of {geo.tokens_per_block}, so max_seq_len is clamped "
               f"from {SEED_MAX_SEQ_LEN} to {clamped}")
        want = {"clamped": (clamped, 68), "configured": (SEED_MAX_SEQ_LEN, 260)}
        empty = [policy for policy in want if seed_max_seq_len.get(policy) is None]
        if empty:  # one line for what is not filled in yet
            failures.append(f"seed: seed_max_seq_len's {' and '.join(map(repr, empty))} "
                            f"{'is' if len(empty) == 1 else 'are'} not filled in yet (Part 2)")
        for policy, (length, width) in want.items():
            given = seed_max_seq_len.get(policy)
            if given is None:
                continue
            elif given != length:
                wrong = f"seed, {policy}: seed_max_seq_len[{policy!r}] = {given}"
                if policy == "clamped" and given == SEED_MAX_SEQ_LEN:
                    mistake = ("you used the configured max_seq_len for the clamped row; since PR "
                               "#12306 the row is sized from the clamped one")
                    hint = (f"{mistake}: how many tokens, in whole blocks of {geo.tokens_per_block}, "
                            "does the 4 MiB pool hold?")
                    reveal_text = f"{mistake}: {why}"
                elif policy == "clamped":
                    hint = ("the clamped length is the longest sequence the pool holds, in whole blocks: "
                            "bytes per token from the model's shape, then tokens, then blocks")
                    reveal_text = f"the clamped length is what the pool holds: {why}"
                else:
                    hint = ("the configured row uses the max_seq_len the engine was configured with, "
                            "not the clamped one")
                    reveal_text = (f"the configured row uses the max_seq_len the engine was configured "
                                   f"with, {SEED_MAX_SEQ_LEN}, not the clamped {clamped}")
                failures.append(_Hint(f"{wrong} is not the length this row is sized from - {hint}",
                                      f"{wrong}, expected {length} - {reveal_text}"))
            else:
                got, error = _call(fn, length, geo.tokens_per_block, 0, 0)
                if error is NOT_YET:
                    failures.append(NOT_YET)
                elif got == width:
                    passes.append(f"seed, {policy}: max_seq_len {length} -> {width} entries "
                                  f"(an 8192-token context needs 256)")
                else:
                    failures.append(f"seed, {policy}: max_seq_len {length} is right, but your "
                                    f"width is {error or got}, expected {width}")
    return _finish("check_page_index_width", failures, passes, strict, reveal=reveal,
                   learner=_learner_name(fn),
                   cases=len(WIDTH_CASES) + (2 if seed_max_seq_len is not None else 0))


# --- exercise 2: predict, then trigger, the ValueError -------------------------------------------

@dataclass(frozen=True)
class PredictionCase:
    """One resize on the seed's model shape (2 layers, 2 KV heads, head_dim 128, fp16, 32 tokens
    per block), configured max_seq_len 8192, batch size 1."""

    pool_mib: float
    context: int
    policy: str

    def __str__(self) -> str:
        return f"{self.pool_mib:g} MiB pool, resize to {self.context} tokens, {self.policy} row"


PREDICTION_CASES: Dict[str, PredictionCase] = {
    "A": PredictionCase(4, 8192, "clamped"),
    "B": PredictionCase(4, 8192, "configured"),
    "C": PredictionCase(4, 2048, "clamped"),
    "D": PredictionCase(4, 2100, "clamped"),
    "E": PredictionCase(4, 2200, "clamped"),
    "F": PredictionCase(8, 8192, "clamped"),
    "G": PredictionCase(16, 8192, "clamped"),
}

OUTCOME_WORDS = {"ok": "allocated (True)", "refused": "refused (resize returns False)",
                 "crash": "ValueError (User-provided base page indices is too short)"}


def describe_prediction_cases() -> str:
    """The cases of exercise 2, one a line, and the three outcomes to choose from."""
    lines = [f"{name}: {case}" for name, case in PREDICTION_CASES.items()]
    lines += ["", "outcomes: " + "; ".join(f"{k!r} = {v}" for k, v in OUTCOME_WORDS.items())]
    return "\n".join(lines)


def _prediction_hint(result) -> str:
    need, width, pages = result.entries_needed, result.max_blocks_per_seq, result.total_blocks
    sized = result.capacity_tokens if result.policy == "clamped" else result.configured_max_seq_len
    row = (f"the {result.policy} row is sized from max_seq_len {sized}: "
           f"ceil(({sized}+1)/32) -> {width} entries; the pool has {pages} pages")
    if result.outcome == "crash":
        return f"{row}; {need} entries needed > {width}: the row is checked BEFORE the pool, so it raises"
    if result.outcome == "refused":
        return f"{row}; {need} entries fit the row ({need} <= {width}) but {need} pages > {pages}: False, nothing changes"
    return f"{row}; {need} entries fit the row and {need} <= {pages} free pages: allocated"


def _prediction_question(case: PredictionCase) -> str:
    """The first failure's hint: the steps to redo, not the outcome."""
    return (f"redo the steps: the pages a {case.pool_mib:g} MiB pool holds, the max_seq_len the "
            f"{case.policy} row is sized from and its width (exercise 1), the entries a resize to "
            f"{case.context} tokens needs; then the check order above: the row before the pool")


def check_predictions(predictions: Dict[str, Optional[str]], *, strict: bool = False,
                      reveal: Optional[bool] = None) -> CheckResult:
    """Exercise 2a: ``predictions`` maps each PREDICTION_CASES name to "ok", "refused" or
    "crash"; each is checked against a real resize (kvlab.analysis.repro.run_repro). A wrong
    prediction gets the steps to redo, then (hint, then reveal) the outcome and its arithmetic."""
    failures, passes = [], []
    if not isinstance(predictions, dict):
        return _finish("check_predictions", [f"predictions must be a dict of case -> outcome, "
                                             f"got {type(predictions).__name__}"], [], strict,
                       reveal=reveal)
    missing = [name for name in PREDICTION_CASES if predictions.get(name) is None]
    if missing:  # one line, not one per case
        failures.append(f"no prediction yet for {', '.join(missing)}: write 'ok', 'refused' or "
                        "'crash' for each case in `predictions`")
    for name, case in PREDICTION_CASES.items():
        result = run_repro(case.pool_mib, case.context, case.policy)
        guess = predictions.get(name)
        if guess is None:
            continue
        elif guess not in RESIZE_OUTCOMES:
            failures.append(f"{name} ({case}): {guess!r} is not an outcome; choose one of {list(RESIZE_OUTCOMES)}")
        elif guess != result.outcome:
            failures.append(_Hint(f"{name} ({case}): you predicted {guess!r}, but the resize does "
                                  f"something else - {_prediction_question(case)}",
                                  f"{name} ({case}): you predicted {guess!r}, the resize gave "
                                  f"{result.outcome!r} - {_prediction_hint(result)}"))
        else:
            passes.append(f"{name} ({case}): {result.outcome!r} - {_prediction_hint(result)}")
    extra = sorted(set(predictions) - set(PREDICTION_CASES))
    if extra:
        failures.append(f"unknown case names {extra}; the cases are {list(PREDICTION_CASES)}")
    return _finish("check_predictions", failures, passes, strict, reveal=reveal,
                   cases=len(PREDICTION_CASES))


def check_trigger(fn: Callable[[], BaseException], *, strict: bool = False,
                  reveal: Optional[bool] = None) -> CheckResult:
    """Exercise 2b: ``fn()`` builds the seed's KVCacheManager (clamped row), resizes a cache to
    8192 tokens, catches the ValueError and returns it."""
    failures, passes = [], []
    try:
        got = fn()
    except NotImplementedError:
        got = None
        failures.append(NOT_YET)
    except PageIndexTooShort as exc:
        got = None
        escaped = f"the ValueError escaped your function ({exc})"
        failures.append(_Hint(f"{escaped}: catch it inside the function and return it",
                              f"{escaped}: wrap the resize in "
                              "`try: ... except ValueError as exc: return exc`"))
    except Exception as exc:
        got = None
        failures.append(f"your function raised {type(exc).__name__}: {exc}")
    if failures:
        pass
    elif isinstance(got, PageIndexTooShort):
        numbers = f"{got.needed_entries} entries needed, the row has {got.available_entries}"
        if (got.needed_entries, got.available_entries) == (256, 68):
            passes.append(f"caught {type(got).__name__} (a ValueError): {got} - {numbers}, as in "
                          "issue #21470")
        else:
            wrong = f"caught the right error, but {numbers}"
            failures.append(_Hint(f"{wrong}; compare your manager and resize with the seed's, "
                                  "as Part 2 gives them",
                                  f"{wrong}; the seed's numbers are 256 and 68: a 4 MiB pool, "
                                  "max_seq_len 8192, 32 tokens per block, a resize to 8192"))
    elif isinstance(got, BaseException):
        failures.append(f"returned {type(got).__name__}: {got}; expected the native "
                        f"{PAGE_INDEX_TOO_SHORT_MESSAGE!r}")
    elif got is False:
        refused = ("returned False: the resize was refused, so the row had room for the context "
                   "and only the pool had not")
        failures.append(_Hint(f"{refused}; which row is too short for an 8192-token context, and "
                              "which page_index_policy sizes it?",
                              f"{refused}; the crash needs a row shorter than the 256 entries the "
                              "context needs: page_index_policy='clamped' (68 entries), and the "
                              "seed's resize to 8192 tokens"))
    elif got is True:
        failures.append("returned True: the resize succeeded, so the pool or the context is not the "
                        "seed's (4 MiB, 8192 tokens)")
    else:
        failures.append(f"returned {got!r}; return the caught exception object (`except ValueError as "
                        "exc: return exc`)")
    return _finish("check_trigger", failures, passes, strict, reveal=reveal, learner=_learner_name(fn))


# --- exercise 3: an admission check --------------------------------------------------------------

def _seed_manager(policy: str = "configured", quota_mib: float = 4, max_batch_size: int = 4,
                  busy_blocks: int = 0, fill_slots: bool = False, **kwargs) -> KVCacheManager:
    """The seed's manager, with ``busy_blocks`` pages already held by another sequence, or
    (``fill_slots``) every page-index slot held by a one-page sequence."""
    mgr = KVCacheManager.expecting_clamp(geometry=seed_geometry(), quota_bytes=int(quota_mib * MIB),
                         max_seq_len=SEED_MAX_SEQ_LEN, max_batch_size=max_batch_size,
                         page_index_policy=policy, **kwargs)
    for i in range(max_batch_size if fill_slots else 0):
        mgr.create_cache(f"other-{i}").resize(mgr.tokens_per_block)
    if busy_blocks:
        assert mgr.create_cache("other").resize(busy_blocks * mgr.tokens_per_block)
    return mgr


#: (label, manager settings, request, the hint a first failure gets (a question: no formula),
#:  what the case teaches (shown from the second failure on, with the worked numbers))
ADMISSION_CASES = [
    ("the seed's 8192-token request", dict(policy="clamped"), Request("big", 8192, 16),
     "can any amount of waiting make this request fit this pool?",
     "demand beyond the pool's total pages can never fit"),
    ("the prompt fits, the whole request does not", {}, Request("long-output", 2000, 100),
     "a request keeps growing after its prompt: what does it hold when it completes?",
     "demand counts every token the request holds when it completes: prompt + max_new_tokens"),
    ("exactly the whole pool", {}, Request("exact", 2048, 0),
     "look at the boundary: is a request that needs exactly what the pool has too big?",
     "a request that needs exactly the total pages fits (> total, not >=)"),
    ("one token over the pool", {}, Request("over", 2048, 1),
     "look at the boundary from the other side, and count pages, not tokens",
     "one token more than the pool's 2048 needs a 65th page"),
    ("the pool is busy", dict(busy_blocks=40), Request("busy", 1024, 64),
     "pages held by other requests come back when they finish: is this a 'never'?",
     "pages held by others are temporary pressure: never-fits is judged against the TOTAL pages"),
    ("the pool is busy, but it fits in what is free", dict(busy_blocks=40), Request("small", 512, 64),
     "which part of the request must find its pages free right now, and which comes later?",
     "fits now: the context's pages are free now (the output grows later)"),
    ("every page-index slot is taken", dict(max_batch_size=1, fill_slots=True),
     Request("no-slot", 256, 32),
     "pages are not all a new sequence takes from the manager: what else must be free for it?",
     "no free page-index slot is temporary too: one comes back when a sequence ends"),
    ("a big pool, a request past the row", dict(quota_mib=64), Request("past-row", 8192, 300),
     "the pool is big enough here: is there another fixed limit on the pages one sequence can address?",
     "the page-index span (max_blocks_per_seq) is a fixed budget too: demand beyond it never fits"),
    ("extra KV tokens", dict(num_extra_kv_tokens=32), Request("extra", 2016, 16),
     "this manager adds something to every sequence's tokens: look again at what you may read",
     "demand includes the manager's num_extra_kv_tokens"),
    ("draft tokens", {}, Request("draft", 2000, 40, num_draft_tokens=16),
     "this request carries more than prompt and output: look again at what you may read",
     "demand includes the request's num_draft_tokens"),
]

CLASSES = (FITS_NOW, TEMPORARILY_BLOCKED, NEVER_FITS)


def _manager_facts(mgr: KVCacheManager) -> str:
    """What the learner can read off the manager (no demand, no formula): the first failure's numbers."""
    return (f"pool {mgr.total_blocks} total, {mgr.free_blocks} free; row {mgr.max_blocks_per_seq} "
            f"entries; {mgr.page_index.free_slots} free slots")


def _admission_numbers(request: Request, mgr: KVCacheManager) -> str:
    """The worked demand with the manager's numbers: shown on a pass, and from a second failure on."""
    tokens = request.prompt_len + request.max_new_tokens + mgr.num_extra_kv_tokens + request.num_draft_tokens
    return (f"demand ceil(({request.prompt_len} prompt + {request.max_new_tokens} new + "
            f"{mgr.num_extra_kv_tokens} extra + {request.num_draft_tokens} draft) / {mgr.tokens_per_block}) = "
            f"{mgr.geometry.blocks_for_tokens(tokens)} blocks; {_manager_facts(mgr)}")


def check_admission(classify: Callable[[Request, KVCacheManager], tuple], *,
                    strict: bool = False, reveal: Optional[bool] = None) -> CheckResult:
    """Exercise 3a: ``classify(request, manager) -> (class, reason)``, class one of "fits now",
    "temporarily blocked", "never fits", against ``CapacityAdmission.classify`` on
    ADMISSION_CASES. A "never fits" reason must state the numbers (demand and the limit); the
    manager must be left as it was. A wrong class gets a question first; the demand formula
    with the case's numbers only from the check's second failure on (hint, then reveal)."""
    reference = CapacityAdmission()
    failures, passes = [], []
    for label, settings, request, question, lesson in ADMISSION_CASES:
        mgr = _seed_manager(**settings)
        expected, _ = reference.classify(request, mgr)
        free_before, caches_before = mgr.free_blocks, len(mgr.caches)
        facts = _manager_facts(mgr)
        got, error = _call(classify, replace(request), mgr)
        numbers = _admission_numbers(request, mgr)
        if error is NOT_YET:
            failures.append(NOT_YET)
            continue
        if error:
            failures.append(f"{label}: classify {error}")
            continue
        if not (isinstance(got, tuple) and len(got) == 2):
            failures.append(f"{label}: classify returned {got!r}; return a pair (class, reason)")
            continue
        verdict, reason = got
        if mgr.free_blocks != free_before or len(mgr.caches) != caches_before:
            failures.append(f"{label}: classify changed the manager ({free_before} -> {mgr.free_blocks} "
                            "free blocks); an admission check only reads")
        elif verdict not in CLASSES:
            failures.append(f"{label}: class {verdict!r} is not one of {list(CLASSES)}")
        elif verdict != expected:
            wrong = f"{label}: expected {expected!r}, got {verdict!r}"
            given = (f"{request.prompt_len} prompt, {request.max_new_tokens} max_new_tokens, "
                     f"{request.num_draft_tokens} draft; {mgr.num_extra_kv_tokens} extra KV tokens, {facts}")
            failures.append(_Hint(f"{wrong} - {question} ({given})", f"{wrong} - {lesson} ({numbers})"))
        elif verdict == NEVER_FITS and not _states_numbers(reason, request, mgr):
            demand = demand_blocks(request, mgr)
            wrong = f"{label}: right class, but the reason {reason!r} should state the numbers"
            failures.append(_Hint(f"{wrong}: the blocks the request needs and the limit it exceeds",
                                  f"{wrong}: {demand} blocks needed and the limit it exceeds "
                                  f"({mgr.total_blocks} total blocks or a {mgr.max_blocks_per_seq}-entry row)"))
        elif verdict != FITS_NOW and not (isinstance(reason, str) and reason.strip()):
            failures.append(f"{label}: right class, but give a reason: why must it wait?")
        else:
            passes.append(f"{label}: {verdict!r} ({numbers})")
    return _finish("check_admission", failures, passes, strict, reveal=reveal,
                   learner=_learner_name(classify))


def _states_numbers(reason, request: Request, mgr: KVCacheManager) -> bool:
    if not isinstance(reason, str):
        return False
    limits = (str(mgr.total_blocks), str(mgr.max_blocks_per_seq))
    return str(demand_blocks(request, mgr)) in reason and any(limit in reason for limit in limits)


#: The scheduler workload of exercise 3b: two requests that do not fit together (the second
#: waits), one that can never fit, and a small one after it.
ADMISSION_WORKLOAD = [Request("s1", 1536, 32), Request("s2", 1536, 32, arrival_step=1),
                      Request("big", 8192, 16, arrival_step=2), Request("s3", 256, 32, arrival_step=3)]


def run_admission_workload(admission, policy: str = "configured", stall_limit: int = 1000):
    """ADMISSION_WORKLOAD through kvlab's Scheduler on the seed's pool under ``admission`` (a
    name or an AdmissionPolicy); returns the SimulationResult."""
    from kvlab.sched.scheduler import Scheduler
    from kvlab.run.simulation import simulate

    mgr = _seed_manager(policy)
    sched = Scheduler(mgr, admission=admission, max_num_tokens=8192, max_batch_size=8,
                      stall_limit=stall_limit)
    return simulate(sched, ADMISSION_WORKLOAD, max_steps=5000)


def check_admission_policy(policy: AdmissionPolicy, *, strict: bool = False,
                           reveal: Optional[bool] = None) -> CheckResult:
    """Exercise 3b: ``policy`` plugged into the Scheduler (kvlab/sched/admission.py's hooks) runs
    ADMISSION_WORKLOAD on the seed's pool under both row widths: "big" is rejected at arrival
    with the numbers, the engine never stops, everything else finishes. A failure points to the
    module docstring first; which hook and which Verdict only from the second failure on."""
    failures, passes = [], []
    if not isinstance(policy, AdmissionPolicy):
        return _finish("check_admission_policy", [f"pass an instance of your AdmissionPolicy subclass, "
                                                  f"got {type(policy).__name__}"], [], strict,
                       reveal=reveal)
    find_the_hook = ("which hook of an AdmissionPolicy runs when a request arrives, and what can it "
                     "return? (kvlab/sched/admission.py's module docstring)")
    the_hook = "in admit(), return Verdict(False, reason) when classify says 'never fits'"
    for width in ("clamped", "configured"):
        try:
            result = run_admission_workload(policy, width)
        except NotImplementedError:
            failures.append(NOT_YET)
            continue
        except Exception as exc:
            failures.append(f"{width} row: the run raised {type(exc).__name__}: {exc}")
            continue
        status = ", ".join(f"{k} {v}" for k, v in result.status.items())
        if result.error is not None:
            stopped = (f"{width} row: the engine stopped at step {result.end_step - 1} with "
                       f"{type(result.error).__name__} ({status})")
            failures.append(_Hint(f"{stopped} - 'big' can never fit this pool and should have been "
                                  f"rejected when it arrived: {find_the_hook}",
                                  f"{stopped} - 'big' needs 257 blocks of 64 and should have been "
                                  f"rejected when it arrived: {the_hook}"))
        elif result.status["big"] != "rejected":
            not_rejected = f"{width} row: 'big' is {result.status['big']!r} ({status})"
            failures.append(_Hint(f"{not_rejected}; it can never fit: reject it when it arrives - "
                                  f"{find_the_hook}", f"{not_rejected}; reject it {the_hook}"))
        elif any(result.status[r] != "finished" for r in ("s1", "s2", "s3")):
            failures.append(f"{width} row: {status} - only 'big' can never fit; 's2' is only "
                            "temporarily blocked behind 's1' and must wait, not be rejected")
        elif not ("257" in result.reasons["big"] and "64" in result.reasons["big"]):
            unnamed = f"{width} row: 'big' was rejected, but its reason {result.reasons['big']!r}"
            failures.append(_Hint(f"{unnamed} should state the numbers: the blocks it needs and "
                                  "the limit it exceeds",
                                  f"{unnamed} should name 257 blocks and the 64 there are"))
        else:
            passes.append(f"{width} row: {status}; 'big': {result.reasons['big']}")
    return _finish("check_admission_policy", failures, passes, strict, reveal=reveal,
                   learner=f"{type(policy).__name__}.admit")


# --- exercise 4: break or continue ---------------------------------------------------------------

@dataclass(frozen=True)
class PendingContext:
    """A context request waiting in phase 2, reduced to what the resident cap reads.
    ``is_first_context_chunk``: it has no resident state yet, so scheduling it starts a new
    sequence (and claims a recurrent-state slot for the rest of its life)."""

    request_id: str
    is_first_context_chunk: bool


def schedule_pending_contexts_buggy(pending_ctx: Sequence[PendingContext], num_resident: int,
                                    max_resident: Optional[int], max_num_requests: int) -> List[str]:
    """The phase-2 loop of PR #17261 (scheduler_v2.py, ``KVCacheV2Scheduler``, around the
    resident-sequence guard the review flagged), reduced to the cap. Returns the ids scheduled
    this iteration, in order. ``max_resident`` None means unbounded (attention-only models).
    It has the bug the review found."""
    scheduled = []
    for req in pending_ctx:
        if len(scheduled) >= max_num_requests:  # the batch is full: nothing later fits either
            break
        # A first context chunk starts a new sequence and therefore claims a
        # state slot for the rest of its lifetime.
        starts_new_sequence = max_resident is not None and req.is_first_context_chunk
        if starts_new_sequence and num_resident >= max_resident:
            break
        scheduled.append(req.request_id)
        if starts_new_sequence:
            num_resident += 1
    return scheduled


def _ctx(spec: str) -> List[PendingContext]:
    """'new-a old-b' -> [first chunk 'new-a', non-first chunk 'old-b']."""
    return [PendingContext(word, word.startswith("new")) for word in spec.split()]


#: (label, pending (new-* = first chunk, old-* = a later chunk), resident, cap, max requests,
#:  expected, the hint a first failure gets, what the case teaches (from the second failure on))
SCAN_CASES = [
    ("the review's case: a capped first chunk before a started one", "new-a old-b", 1, 1, 8, ["old-b"],
     "'new-a' must wait (1 of 1 resident slots taken), but 'old-b' already holds its slot: "
     "why did your scan never reach 'old-b'?",
     "'new-a' must wait (1 of 1 resident slots taken), but 'old-b' already holds its slot; "
     "`break` ended the scan at 'new-a' and starved 'old-b' - skip only the capped request (`continue`)"),
    ("room for one more new sequence", "new-a new-b old-c", 1, 2, 8, ["new-a", "old-c"],
     "'new-a' takes the last slot: does your loop know the slot is taken when it reaches 'new-b'?",
     "'new-a' takes the last slot (count it: num_resident += 1), 'new-b' must wait, 'old-c' still runs"),
    ("started chunks never count against the cap", "old-a old-b old-c", 3, 3, 8, ["old-a", "old-b", "old-c"],
     "does a later chunk of a started sequence need a new slot?",
     "the cap gates only first chunks: a later chunk needs no new slot"),
    ("no cap (attention-only: max_resident None)", "new-a new-b", 5, None, 8, ["new-a", "new-b"],
     "what does max_resident None mean?",
     "None means unbounded"),
    ("every new sequence capped", "new-a new-b", 2, 2, 8, [],
     "how many slots are free for a first chunk?",
     "no slot is free: no first chunk may start"),
    ("the batch budget is full", "old-a old-b old-c", 0, None, 2, ["old-a", "old-b"],
     "the batch budget is a limit too",
     "max_num_requests still ends the scan"),
]


def run_resident_iterations(fn, max_steps: int = 12) -> tuple:
    """Drive ``fn`` as the scheduler would, one call per iteration: 'waiter' arrived first but
    could not start; 'runner' started and holds the only resident slot (cap 1), with two chunks
    to go; a scheduled chunk completes in its iteration, and a finished request frees its slot.
    Returns (steps to finish everything or None if it stalls, one log line per iteration)."""
    chunks_left = {"waiter": 2, "runner": 2}
    started = {"waiter": False, "runner": True}
    resident, log = 1, []
    for step in range(max_steps):
        pending = [PendingContext(r, not started[r]) for r in ("waiter", "runner") if chunks_left[r]]
        if not pending:
            return step, log
        scheduled = list(fn(pending, resident, 1, 8))
        for r in scheduled:
            resident += 0 if started[r] else 1
            started[r] = True
            chunks_left[r] -= 1
            if chunks_left[r] == 0:
                resident -= 1
        log.append(f"iteration {step}: pending {[p.request_id for p in pending]}, scheduled {scheduled}, "
                   f"resident {resident}/1")
    return None, log


def _scan_overrun(got: List[str], expected: List[str], resident: int, cap, budget: int) -> Optional[str]:
    """What a scan did wrong when it scheduled what the budget or a full cap forbids (the cases'
    own questions are about the other slips), or None."""
    if len(got) > budget:
        return f"{len(got)} scheduled: more than max_num_requests={budget}, the batch budget"
    extra = [r for r in got if r not in expected and r.startswith("new")]
    if extra and cap is not None and resident >= cap:  # every slot was taken from the start
        return (f"{', '.join(repr(r) for r in extra)} started a new sequence with no resident "
                f"slot free (cap {cap}): a fix must keep the cap, and hold a first chunk back when "
                "every slot is taken")
    return None


def check_resident_scan(fn: Callable[..., List[str]], *, strict: bool = False,
                        reveal: Optional[bool] = None) -> CheckResult:
    """Exercise 4: ``fn(pending_ctx, num_resident, max_resident, max_num_requests)`` returns the
    ids scheduled, on SCAN_CASES and over several iterations (run_resident_iterations). A wrong
    case gets a question first; the fix only from the check's second failure on."""
    failures, passes = [], []
    for label, spec, resident, cap, budget, expected, question, lesson in SCAN_CASES:
        got, error = _call(fn, _ctx(spec), resident, cap, budget)
        where = f"pending [{spec}], {resident} resident, cap {cap}, max {budget} requests"
        if error is NOT_YET:
            failures.append(NOT_YET)
        elif error:
            failures.append(f"{label} ({where}): {error}")
        elif list(got or []) != expected:
            wrong = f"{label} ({where}): scheduled {list(got or [])}, expected {expected}"
            overrun = _scan_overrun(list(got or []), expected, resident, cap, budget)
            failures.append(f"{wrong} - {overrun}" if overrun else
                            _Hint(f"{wrong} - {question}", f"{wrong} - {lesson}"))
        else:
            passes.append(f"{label}: {expected}")
    try:
        steps, log = run_resident_iterations(fn)
    except NotImplementedError:
        failures.append(NOT_YET)
    except Exception as exc:
        failures.append(f"over several iterations: raised {type(exc).__name__}: {exc}")
    else:
        if steps is None:
            failures.append("over several iterations: the scheduler stalls - 'runner' holds the only slot "
                            "and never gets its next chunk, so it never frees the slot 'waiter' waits for: "
                            + " | ".join(log[:3]) + " | ...")
        else:
            passes.append(f"over several iterations: everything finishes in {steps} iterations")
    return _finish("check_resident_scan", failures, passes, strict, reveal=reveal,
                   learner=_learner_name(fn))
