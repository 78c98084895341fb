"""Exercise 2: predict, then trigger, the ValueError. Native ``KvCache::resize`` checks the
page-index row before the pool (kvlab/core/kv_cache.py; docs/REFERENCE.md §3): the learner
predicts what each resize does, then makes the seed's resize raise it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from unittest.mock import patch

from kvlab.analysis.presets import RESIZE_OUTCOMES
from kvlab.analysis.repro import run_repro
from kvlab.core.arith import div_ceil
from kvlab.core.kv_cache import PAGE_INDEX_TOO_SHORT_MESSAGE, KVCache, PageIndexTooShort
from kvlab.core.words import a_or_an
from kvlab.workshop.feedback import NOT_YET, CheckResult, Hint, Passed, finish


@dataclass(frozen=True)
class PredictionCase:
    """One resize on the seed's model shape (2 layers, 2 KV heads, head_dim 128, fp16, 32 tokens
    per block), configured max_seq_len 8,192, batch size 1."""

    pool_mib: float
    context: int
    policy: str

    def __str__(self) -> str:
        return f"{self.pool_mib:g} MiB pool, resize to {self.context:,} tokens, {self.policy} row"


PREDICTION_CASES: dict[str, PredictionCase] = {
    "A": PredictionCase(4, 8192, "clamped"),
    "B": PredictionCase(4, 8192, "configured"),
    "C": PredictionCase(4, 2048, "clamped"),
    "D": PredictionCase(4, 2100, "clamped"),
    "E": PredictionCase(4, 2200, "clamped"),
    "F": PredictionCase(8, 8192, "clamped"),
    "G": PredictionCase(16, 8192, "clamped"),
}

OUTCOME_WORDS = {
    "ok": "allocated (True)",
    "refused": "refused (resize returns False)",
    "crash": "ValueError (User-provided base page indices is too short)",
}


def describe_prediction_cases() -> str:
    """The cases of exercise 2, one a line, and the three outcomes to choose from."""
    lines = [f"{name}: {case}" for name, case in PREDICTION_CASES.items()]
    lines += ["", "outcomes: " + "; ".join(f"{k!r} = {v}" for k, v in OUTCOME_WORDS.items())]
    return "\n".join(lines)


def _prediction_hint(result) -> str:
    need, width, pages = result.entries_needed, result.max_blocks_per_seq, result.total_blocks
    sized = result.capacity_tokens if result.policy == "clamped" else result.configured_max_seq_len
    row = (
        f"the {result.policy} row is sized from max_seq_len {sized:,}: "
        f"ceil(({sized:,}+1)/32) -> {width} entries; the pool has {pages} pages"
    )
    if result.outcome == "crash":
        return f"{row}; {need} entries needed > {width}: the row is checked BEFORE the pool, so it raises"
    if result.outcome == "refused":
        return (
            f"{row}; {need} entries fit the row ({need} <= {width}) but {need} pages > {pages}: "
            "the resize returns False, and nothing changes"
        )
    return f"{row}; {need} entries fit the row and {need} <= {pages} free pages: allocated"


def _prediction_question(case: PredictionCase) -> str:
    """The first failure's hint: the steps to redo, not the outcome."""
    return (
        f"redo the steps: the pages {a_or_an(f'{case.pool_mib:g}')} {case.pool_mib:g} MiB pool holds, the "
        f"max_seq_len the {case.policy} row is sized from and its width (exercise 1), the entries a resize to "
        f"{case.context:,} tokens needs; then the check order above: the row before the pool"
    )


def check_predictions(
    predictions: dict[str, str | None], *, strict: bool = False, reveal: bool | None = None
) -> CheckResult:
    """Exercise 2a: ``predictions`` maps each PREDICTION_CASES name to "ok", "refused" or
    "crash", each checked against a real resize (kvlab.analysis.repro.run_repro)."""
    if not isinstance(predictions, dict):
        wrong = f"predictions must be a dict of case -> outcome, got {type(predictions).__name__}"
        return finish("check_predictions", [wrong], strict, reveal, predictions)
    outcomes: list = []
    missing = [name for name in PREDICTION_CASES if predictions.get(name) is None]
    if missing:  # one line, not one per case
        outcomes.append(
            f"no prediction yet for {', '.join(missing)}: write 'ok', 'refused' or "
            "'crash' for each case in `predictions`"
        )
    for name, case in PREDICTION_CASES.items():
        result, guess = run_repro(case.pool_mib, case.context, case.policy), predictions.get(name)
        if guess is None:
            continue
        if guess not in RESIZE_OUTCOMES:
            outcomes.append(
                f"{name} ({case}): {guess!r} is not an outcome; choose one of {list(RESIZE_OUTCOMES)}"
            )
        elif guess != result.outcome:  # the hint does not name the guess: a second guess reveals
            outcomes.append(
                Hint(
                    f"{name} ({case}): your prediction is not what the resize does - "
                    f"{_prediction_question(case)}",
                    f"{name} ({case}): you predicted {guess!r}, the resize gave "
                    f"{result.outcome!r} - {_prediction_hint(result)}",
                    part=guess,
                )
            )
        else:
            outcomes.append(
                Passed(f"{name} ({case}): {result.outcome!r} - {_prediction_hint(result)}")
            )
    extra = sorted(set(predictions) - set(PREDICTION_CASES))
    if extra:
        outcomes.append(f"unknown case names {extra}; the cases are {list(PREDICTION_CASES)}")
    cases = len(PREDICTION_CASES)
    return finish("check_predictions", outcomes, strict, reveal, predictions, None, cases)


@dataclass(frozen=True)
class _Resize:
    """One ``KVCache.resize`` the learner's function made, and what it did (True, False, or the
    exception it raised)."""

    capacity: int
    tokens_per_block: int
    width: int
    pages: int
    outcome: bool | Exception

    @property
    def needed(self) -> int:
        return div_ceil(self.capacity, self.tokens_per_block)


@contextmanager
def _watching_resizes() -> Iterator[list[_Resize]]:
    """Record every KVCache.resize made inside the block (the learner's code), in order."""
    resize, made = KVCache.resize, []

    def watched(cache, capacity, *args, **kwargs):
        mgr = cache.manager
        facts = (capacity, mgr.tokens_per_block, mgr.max_blocks_per_seq, mgr.pool.num_blocks)
        try:
            outcome = resize(cache, capacity, *args, **kwargs)
        except Exception as exc:
            made.append(_Resize(*facts, exc))
            raise
        made.append(_Resize(*facts, outcome))
        return outcome

    with patch.object(KVCache, "resize", watched):
        yield made


SEED_CRASH = (
    "the seed's crash needs the clamped row (page_index_policy='clamped': 68 entries) and a "
    "resize to 8,192 tokens (256 entries): 4 MiB, max_seq_len 8,192, 32 tokens per block"
)


def _no_value_error(got, made: list[_Resize]):
    """What happened when fn returned ``got``, not a ValueError, read off the resizes it made;
    the hint names what the resize did, not what fn returned."""
    returned = f"returned {got!r}"
    caught = [r.outcome for r in made if isinstance(r.outcome, BaseException)]
    if caught:
        what = f"its message as a str ({got!r})" if got == str(caught[-1]) else repr(got)
        return (
            f"your resize raised {type(caught[-1]).__name__} (a ValueError) and your function "
            f"caught it, but returned {what}: return the exception object itself, "
            "`except ValueError as exc: return exc`"
        )
    if not made:
        return (
            f'{returned} and resized no cache: create one (`mgr.create_cache("req-0")`) and '
            "resize it to 8,192 tokens"
        )
    last = made[-1]
    fits_row = (
        f"your row has {last.width} entries and a resize to {last.capacity:,} tokens needs "
        f"ceil({last.capacity:,}/{last.tokens_per_block}) = {last.needed} <= {last.width}, so it "
        "passed the row check"
    )
    did = "returned False (refused)" if last.outcome is False else "returned True (allocated)"
    head = f"no ValueError was raised - your resize to {last.capacity:,} tokens {did}"
    if last.outcome is False:
        return Hint(
            f"{head}: which row did you build? A row wide enough for the context passes "
            "the row check, and only the pool refuses",
            f"{returned}: {head}: {fits_row}, and only the pool said no ({last.needed} pages "
            f"needed, {last.pages} in the pool); {SEED_CRASH}",
        )
    return Hint(
        f"{head}: which row, which pool and which resize did you build? Compare them with "
        "the seed's, as Part 2 gives them",
        f"{returned}: {head}: {fits_row}, and the pool's {last.pages} pages hold {last.needed}; "
        f"{SEED_CRASH}",
    )


def _returned_feedback(got, made: list[_Resize]):
    """The pass line if fn returned the seed's error, raised by its resize; else the feedback."""
    raised = any(r.outcome is got for r in made)
    if isinstance(got, PageIndexTooShort) and not raised:
        return (
            f"returned {type(got).__name__}: {got} (no resize raised it: your own code "
            "made it); build the seed's manager, resize a cache to 8,192 tokens and return "
            "the error that resize raises"
        )
    if isinstance(got, PageIndexTooShort):
        if (got.needed_entries, got.available_entries) == (256, 68):
            return Passed(
                f"caught {type(got).__name__} (a ValueError): {got} - {got.needed_entries} "
                f"entries needed, the row has {got.available_entries}, as in issue #21470"
            )
        wrong = (
            f"caught the right error, but {got.needed_entries} entries needed, the row has "
            f"{got.available_entries}"
        )
        return Hint(
            f"{wrong}; compare your manager and resize with the seed's, as Part 2 gives them",
            f"{wrong}; the seed's numbers are 256 and 68: a 4 MiB pool, "
            "max_seq_len 8,192, 32 tokens per block, a resize to 8,192",
        )
    if isinstance(got, BaseException):
        source = "a resize raised it" if raised else "no resize raised it: your own code made it"
        return (
            f"returned {type(got).__name__}: {got} ({source}); expected the "
            f"{PageIndexTooShort.__name__} a resize to 8,192 tokens raises on the seed's clamped "
            f"row, {PAGE_INDEX_TOO_SHORT_MESSAGE!r}"
        )
    return _no_value_error(got, made)


def check_trigger(
    fn: Callable[[], BaseException], *, strict: bool = False, reveal: bool | None = None
) -> CheckResult:
    """Exercise 2b: ``fn()`` builds the seed's KVCacheManager (clamped row), resizes a cache to
    8,192 tokens, catches the ValueError and returns it; else the feedback says what its
    resizes did."""
    with _watching_resizes() as made:
        try:
            got = fn()
        except NotImplementedError:
            outcome = NOT_YET
        except PageIndexTooShort as exc:
            escaped = f"the ValueError escaped your function ({exc})"
            outcome = Hint(
                f"{escaped}: catch it inside the function and return it",
                f"{escaped}: wrap the resize in `try: ... except ValueError as exc: return exc`",
            )
        except Exception as exc:
            outcome = f"your function raised {type(exc).__name__}: {exc}"
        else:
            outcome = _returned_feedback(got, made)
    return finish("check_trigger", [outcome], strict, reveal, fn)
