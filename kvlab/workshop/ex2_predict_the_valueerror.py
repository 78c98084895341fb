"""Exercise 2: predict, then trigger, the ValueError. Native ``KvCache::resize`` checks the
page-index row before the pool (kvlab/core/kv_cache.py; docs/REFERENCE.md §3): the learner
predicts what each resize does, then makes the seed's resize raise it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from kvlab.analysis.presets import RESIZE_OUTCOMES
from kvlab.analysis.repro import run_repro
from kvlab.core.arith import div_ceil
from kvlab.core.kv_cache import PAGE_INDEX_TOO_SHORT_MESSAGE, KVCache, PageIndexTooShort
from kvlab.core.words import a_or_an
from kvlab.workshop.feedback import NOT_YET, CheckResult, Hint, check_flags, finish, learner_name


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
    "crash"; each is checked against a real resize (kvlab.analysis.repro.run_repro). A wrong
    prediction gets the steps to redo, then (hint, then reveal) the outcome and its arithmetic."""
    check_flags(strict, reveal)
    failures, passes = [], []
    if not isinstance(predictions, dict):
        return finish(
            "check_predictions",
            [f"predictions must be a dict of case -> outcome, got {type(predictions).__name__}"],
            [],
            strict,
            answer=predictions,
            reveal=reveal,
        )
    missing = [name for name in PREDICTION_CASES if predictions.get(name) is None]
    if missing:  # one line, not one per case
        failures.append(
            f"no prediction yet for {', '.join(missing)}: write 'ok', 'refused' or "
            "'crash' for each case in `predictions`"
        )
    for name, case in PREDICTION_CASES.items():
        result = run_repro(case.pool_mib, case.context, case.policy)
        guess = predictions.get(name)
        if guess is None:
            continue
        elif guess not in RESIZE_OUTCOMES:
            failures.append(
                f"{name} ({case}): {guess!r} is not an outcome; choose one of {list(RESIZE_OUTCOMES)}"
            )
        elif guess != result.outcome:
            # the hint does not name the guess: another wrong guess for this case is the same
            # slip after a change, and reveals; a change of another case's guess does not
            failures.append(
                Hint(
                    f"{name} ({case}): your prediction is not what the resize does - "
                    f"{_prediction_question(case)}",
                    f"{name} ({case}): you predicted {guess!r}, the resize gave "
                    f"{result.outcome!r} - {_prediction_hint(result)}",
                    part=guess,
                )
            )
        else:
            passes.append(f"{name} ({case}): {result.outcome!r} - {_prediction_hint(result)}")
    extra = sorted(set(predictions) - set(PREDICTION_CASES))
    if extra:
        failures.append(f"unknown case names {extra}; the cases are {list(PREDICTION_CASES)}")
    return finish(
        "check_predictions",
        failures,
        passes,
        strict,
        answer=predictions,
        reveal=reveal,
        cases=len(PREDICTION_CASES),
    )


@dataclass(frozen=True)
class _Resize:
    """One ``KVCache.resize`` made by the learner's function: its capacity, the page size and the
    entries it needs, the row's width, the pool's pages, and what it did (True, False, or the
    exception raised)."""

    capacity: int
    tokens_per_block: int
    needed: int
    width: int
    pages: int
    outcome: object


@contextmanager
def _watching_resizes() -> Iterator[list[_Resize]]:
    """Record every KVCache.resize made inside the block (the learner's code), in order."""
    resize, made = KVCache.resize, []

    def watched(cache, capacity, *args, **kwargs):
        def record(outcome):
            tpb = cache.tokens_per_block
            made.append(
                _Resize(
                    capacity,
                    tpb,
                    div_ceil(capacity, tpb),
                    cache.page_index.width,
                    cache.pool.num_blocks,
                    outcome,
                )
            )

        try:
            outcome = resize(cache, capacity, *args, **kwargs)
        except Exception as exc:
            record(exc)
            raise
        record(outcome)
        return outcome

    KVCache.resize = watched
    try:
        yield made
    finally:
        KVCache.resize = resize


SEED_CRASH = (
    "the seed's crash needs the clamped row (page_index_policy='clamped': 68 entries) and a "
    "resize to 8,192 tokens (256 entries): 4 MiB, max_seq_len 8,192, 32 tokens per block"
)


def _no_value_error(got, made: list[_Resize]):
    """What happened when fn returned ``got``, not a ValueError: read off the resizes it made."""
    returned = f"returned {got!r}"
    caught = [r for r in made if isinstance(r.outcome, BaseException)]
    if caught:
        exc = caught[-1].outcome
        what = f"its message as a str ({got!r})" if got == str(exc) else repr(got)
        return (
            f"your resize raised {type(exc).__name__} (a ValueError) and your function caught it, "
            f"but returned {what}: return the exception object itself, "
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
    # the hint names what the resize did, not what the function returned: returning the resize's
    # result instead of None is the same slip after a change, and reveals
    if last.outcome is False:
        head = f"no ValueError was raised - your resize to {last.capacity:,} tokens returned False (refused)"
        return Hint(
            f"{head}: which row did you build? A row wide enough for the context passes "
            "the row check, and only the pool refuses",
            f"{returned}: {head}: {fits_row}, and only the pool said no ({last.needed} pages "
            f"needed, {last.pages} in the pool); {SEED_CRASH}",
        )
    head = f"no ValueError was raised - your resize to {last.capacity:,} tokens returned True (allocated)"
    return Hint(
        f"{head}: which row, which pool and which resize did you build? Compare them with "
        "the seed's, as Part 2 gives them",
        f"{returned}: {head}: {fits_row}, and the pool's {last.pages} pages hold {last.needed}; "
        f"{SEED_CRASH}",
    )


def check_trigger(
    fn: Callable[[], BaseException], *, strict: bool = False, reveal: bool | None = None
) -> CheckResult:
    """Exercise 2b: ``fn()`` builds the seed's KVCacheManager (clamped row), resizes a cache to
    8,192 tokens, catches the ValueError and returns it. When it returns anything else, the
    feedback says what its resizes did (recorded while it runs)."""
    check_flags(strict, reveal)
    failures, passes = [], []
    with _watching_resizes() as made:
        try:
            got = fn()
        except NotImplementedError:
            got = None
            failures.append(NOT_YET)
        except PageIndexTooShort as exc:
            got = None
            escaped = f"the ValueError escaped your function ({exc})"
            failures.append(
                Hint(
                    f"{escaped}: catch it inside the function and return it",
                    f"{escaped}: wrap the resize in "
                    "`try: ... except ValueError as exc: return exc`",
                )
            )
        except Exception as exc:
            got = None
            failures.append(f"your function raised {type(exc).__name__}: {exc}")
    if failures:
        pass
    elif isinstance(got, PageIndexTooShort) and not any(r.outcome is got for r in made):
        failures.append(
            f"returned {type(got).__name__}: {got} (no resize raised it: your own code "
            "made it); build the seed's manager, resize a cache to 8,192 tokens and return "
            "the error that resize raises"
        )
    elif isinstance(got, PageIndexTooShort):
        numbers = f"{got.needed_entries} entries needed, the row has {got.available_entries}"
        if (got.needed_entries, got.available_entries) == (256, 68):
            passes.append(
                f"caught {type(got).__name__} (a ValueError): {got} - {numbers}, as in issue #21470"
            )
        else:
            wrong = f"caught the right error, but {numbers}"
            failures.append(
                Hint(
                    f"{wrong}; compare your manager and resize with the seed's, "
                    "as Part 2 gives them",
                    f"{wrong}; the seed's numbers are 256 and 68: a 4 MiB pool, "
                    "max_seq_len 8,192, 32 tokens per block, a resize to 8,192",
                )
            )
    elif isinstance(got, BaseException):
        raised = any(r.outcome is got for r in made)
        source = "a resize raised it" if raised else "no resize raised it: your own code made it"
        failures.append(
            f"returned {type(got).__name__}: {got} ({source}); expected the "
            f"{PageIndexTooShort.__name__} a resize to 8,192 tokens raises on the seed's clamped "
            f"row, {PAGE_INDEX_TOO_SHORT_MESSAGE!r}"
        )
    else:
        failures.append(_no_value_error(got, made))
    return finish(
        "check_trigger",
        failures,
        passes,
        strict,
        answer=fn,
        reveal=reveal,
        learner=learner_name(fn),
    )


__all__ = [
    "OUTCOME_WORDS",
    "PREDICTION_CASES",
    "PredictionCase",
    "check_predictions",
    "check_trigger",
    "describe_prediction_cases",
]
