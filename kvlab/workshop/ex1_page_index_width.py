"""Exercise 1: the page-index width, ``max_blocks_per_seq`` of ``KVCacheManagerV2.__init__``
(kvlab/core/page_index.py; docs/REFERENCE.md §2), then the max_seq_len each width policy feeds it
for the seed's 4 MiB pool.
"""

from __future__ import annotations

from collections.abc import Callable

from kvlab.analysis.presets import seed_geometry
from kvlab.core.arith import div_ceil
from kvlab.core.memory import MIB
from kvlab.core.page_index import max_blocks_per_seq
from kvlab.workshop.feedback import (
    NOT_YET,
    CheckResult,
    Hint,
    Passed,
    call_learner,
    finish,
    learner_name,
)

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


def _up4(n: int) -> int:
    return div_ceil(n, 4) * 4


def _width_mistakes(L: int, t: int, e: int, d: int, expected: int) -> list[tuple]:
    """(the value a typical slip gives, its name (the hint), the worked numbers (the reveal)),
    in order: the first match is shown."""
    raw, no_one = div_ceil(L + e + d + 1, t), div_ceil(L + e + d, t)
    tokens = f"{L:,}+{e:,}+{d:,}"
    right = f"ceil(({tokens}+1)/{t})={raw:,}"
    to = f": {right} -> {expected:,}"
    up = f": {right}, rounded UP to a multiple of 4 = {expected:,}, not"
    pad = "the padding only adds entries"
    nearest = [
        (n, f"you padded to the nearest multiple of 4: {pad}", f"{up} to the nearest, {n:,}")
        for n in (round(raw / 4) * 4, (raw + 2) // 4 * 4)  # ties to even (round), or up
    ]
    return [
        (
            _up4(no_one),
            "you forgot the +1 decode token",
            f": ceil(({tokens})/{t})={no_one:,} -> {_up4(no_one):,}, expected {right} -> {expected:,}",
        ),
        (
            raw,
            "you did not round up to a multiple of 4 (the copy_block_offsets kernel)",
            f": {right}, rounded up to a multiple of 4 = {expected:,}",
        ),
        (no_one, "you forgot both the +1 decode token and the rounding up to a multiple of 4", to),
        (
            div_ceil(raw, 8) * 8,
            "you rounded up to a multiple of 8; the row is padded to a multiple of 4",
            f": {raw:,} -> {expected:,}",
        ),
        (
            raw // 4 * 4,
            f"you padded down to a multiple of 4: {pad}",
            f"{up} down to {raw // 4 * 4:,}",
        ),
        *nearest,
        (
            _up4((L + e + d + 1) // t),
            "you rounded the division down: a partly filled block still needs an entry",
            f", so {right} -> {expected:,}",
        ),
        (_up4(div_ceil(L + d + 1, t)), f"you left out the extra KV tokens ({e:,})", to),
        (_up4(div_ceil(L + e + 1, t)), f"you left out the draft tokens ({d:,})", to),
    ]


def _width_case(fn, label, L, t, e, d, slip: int | None):
    """The pass line if fn is right on this case, else its feedback. ``slip``: the index of the
    mistake that explains every case, if one does."""
    expected = max_blocks_per_seq(L, t, e, d)
    call = f"page_index_width({L}, {t}, {e}, {d})"
    got, failure = call_learner(fn, L, t, e, d, where=f"{label}: {call} ")
    if failure:
        return failure
    if isinstance(got, bool) or not isinstance(got, int):
        return f"{label}: {call} returned {got!r} ({type(got).__name__}); return an int number of entries"
    if got == expected:
        return Passed(f"{label}: {call} = {expected}")
    mistakes = _width_mistakes(L, t, e, d, expected)
    name, worked = next(
        (
            (n, w)
            for value, n, w in ([mistakes[slip]] if slip is not None else []) + mistakes
            if value == got
        ),
        (
            "none of the usual slips gives this: check each of Part 1's three rules",
            f"; expected round_up_to_multiple_of_4(ceil(({L:,}+{e:,}+{d:,}+1)/{t})) = {expected:,}",
        ),
    )
    head = f"{label}: {call} returned {got:,}, expected {expected:,} - {name}"
    return Hint(head, head + worked, part=fn)  # the function, not the seed lengths beside it


def _width_slip(fn) -> int | None:
    """The one typical mistake that gives fn's answer on every case, if there is one."""
    answers = [call_learner(fn, L, t, e, d)[0] for _, L, t, e, d in WIDTH_CASES]
    tables = [
        [m[0] for m in _width_mistakes(L, t, e, d, max_blocks_per_seq(L, t, e, d))]
        for _, L, t, e, d in WIDTH_CASES
    ]
    return next(
        (k for k in range(len(tables[0])) if all(t[k] == a for t, a in zip(tables, answers))), None
    )


def _seed_feedback(policy: str, given: int, length: int, blocks: int, tpb: int, why: str) -> Hint:
    """A wrong Part 2 length: the hint names the entry, not its value, so another wrong length of
    the same kind is the same slip after a change, and reveals."""
    clamped = "the clamped length is"
    if policy == "clamped" and given in (blocks, SEED_MAX_SEQ_LEN):
        mistake = (
            f"{blocks} is the pool's pages (blocks of {tpb} tokens); max_seq_len counts tokens"
            if given == blocks
            else "you used the configured max_seq_len for the clamped row; since PR #12306 the "
            "row is sized from the clamped one"
        )
        question = (
            "how many tokens do they hold?"
            if given == blocks
            else f"how many tokens, in whole blocks of {tpb}, does the 4 MiB pool hold?"
        )
        hint, reveal = f"{mistake}: {question}", f"{mistake}: {why}"
    elif policy == "clamped":
        hint = (
            f"{clamped} the longest sequence the pool holds, in whole blocks: "
            "bytes per token from the model's shape, then tokens, then blocks"
        )
        reveal = f"{clamped} what the pool holds: {why}"
    else:
        used = "the configured row uses the max_seq_len the engine was configured with"
        hint = f"{used}, not the clamped one"
        reveal = f"{used}, {SEED_MAX_SEQ_LEN:,}, not the clamped {blocks * tpb:,}"
    entry = f"seed, {policy}: seed_max_seq_len[{policy!r}]"
    return Hint(
        f"{entry} is not the length this row is sized from - {hint}",
        f"{entry} = {given:,}, expected {length:,} - {reveal}",
        part=given,
    )


def _seed_cases(fn, seed_max_seq_len: dict) -> list:
    """Part 2: the max_seq_len each width policy feeds in for the seed's pool, and fn's width."""
    geo = seed_geometry()
    blocks = SEED_POOL_BYTES // geo.bytes_per_block
    clamped = blocks * geo.tokens_per_block
    why = (
        f"4 MiB / {geo.bytes_per_token:,} B per token = {SEED_POOL_BYTES // geo.bytes_per_token:,} "
        f"tokens = {blocks} blocks of {geo.tokens_per_block}, so max_seq_len is clamped "
        f"from {SEED_MAX_SEQ_LEN:,} to {clamped:,}"
    )
    want = {"clamped": (clamped, 68), "configured": (SEED_MAX_SEQ_LEN, 260)}
    outcomes: list = []
    empty = [policy for policy in want if seed_max_seq_len.get(policy) is None]
    if empty:  # one line for what is not filled in yet
        outcomes.append(
            f"seed: seed_max_seq_len's {' and '.join(map(repr, empty))} "
            f"{'is' if len(empty) == 1 else 'are'} not filled in yet (Part 2)"
        )
    for policy, (length, width) in want.items():
        given = seed_max_seq_len.get(policy)
        if given is None:
            continue
        if isinstance(given, bool) or not isinstance(given, int):
            outcomes.append(
                f"seed, {policy}: seed_max_seq_len[{policy!r}] = {given!r} "
                f"({type(given).__name__}); give an int number of tokens"
            )
        elif given != length:
            outcomes.append(
                _seed_feedback(policy, given, length, blocks, geo.tokens_per_block, why)
            )
        else:
            got, error = call_learner(fn, length, geo.tokens_per_block, 0, 0)
            if error is NOT_YET:
                outcomes.append(NOT_YET)
            elif got == width:
                line = f"seed, {policy}: max_seq_len {length:,} -> {width} entries"
                outcomes.append(Passed(f"{line} (an 8,192-token context needs 256)"))
            else:
                outcomes.append(
                    f"seed, {policy}: max_seq_len {length:,} is right, but your "
                    f"width is {error or got}, expected {width}"
                )
    return outcomes


def check_page_index_width(
    fn: Callable[[int, int, int, int], int],
    seed_max_seq_len: dict[str, int | None] | None = None,
    *,
    strict: bool = False,
    reveal: bool | None = None,
) -> CheckResult:
    """Exercise 1: ``fn(max_seq_len, tokens_per_block, extra, draft)`` against kvlab's
    ``max_blocks_per_seq`` on WIDTH_CASES; with ``seed_max_seq_len`` ({"clamped": ..,
    "configured": ..}), also the seed's 68 and 260."""
    slip = _width_slip(fn)
    outcomes = [_width_case(fn, *case, slip) for case in WIDTH_CASES]
    cases = len(WIDTH_CASES)
    if seed_max_seq_len is not None:
        outcomes += _seed_cases(fn, seed_max_seq_len)
        cases += 2
    answer, learner = (fn, seed_max_seq_len), learner_name(fn)
    return finish("check_page_index_width", outcomes, strict, reveal, answer, learner, cases)
