"""Exercise 1: the page-index width, ``max_blocks_per_seq`` of ``KVCacheManagerV2.__init__``
(kvlab/core/page_index.py; docs/REFERENCE.md §2), then the max_seq_len each width policy feeds it
for the seed's 4 MiB pool.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

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
    ("a last page more than half full", 2070, 32, 0, 0),
    ("16-token pages", 100, 16, 0, 0),
    ("64-token pages", 4096, 64, 0, 0),
    ("extra KV tokens", 2000, 32, 100, 0),
    ("draft tokens", 2000, 32, 0, 100),
] + [
    (
        f"spot check: {L:,} tokens of {t}"
        + (f", {e} extra" if e else "")
        + (f", {d} draft" if d else ""),
        L,
        t,
        e,
        d,
    )
    # lengths chosen so that no two combinations of the typical slips (WIDTH_WAYS) answer
    # alike on every case unless they compute the same function, as padding to the nearest
    # multiple of 4 (ties up) and forgetting the +1 with a floored division do: n // t is
    # ceil((n + 1) / t) - 1 for every n >= 0, and ceil((b - 1) / 4) * 4 is (b + 2) // 4 * 4,
    # so no case tells those two apart and the feedback names both
    for L, t, e, d in [
        (1135, 32, 0, 0),
        (2045, 32, 100, 0),
        (2416, 16, 0, 100),
        (3018, 64, 37, 0),
        (904, 16, 0, 0),
        (351, 64, 0, 0),
        (1856, 64, 0, 0),
        (1884, 64, 0, 100),
        (729, 16, 0, 0),
        (1919, 64, 0, 0),
    ]
]
SEED_POOL_BYTES = 4 * MIB
SEED_MAX_SEQ_LEN = 8192


#: The ways a typical answer divides tokens by the page size: (how it reads, the hint).
DIVISIONS: dict[str, tuple[Callable[[int, int], int], str | None]] = {
    "ceil": (div_ceil, None),
    "floor": (
        lambda n, t: n // t,
        "you rounded the division down: a partly filled block still needs an entry",
    ),
    "round": (
        lambda n, t: round(n / t),
        "you rounded the division to the nearest: a partly filled block still needs an entry",
    ),
}
PAD = "the padding only adds entries"
#: The ways a typical answer pads the row (the copy_block_offsets kernel's multiple of 4):
#: (what it does, in the worked numbers; the hint).
PADDINGS: dict[str, tuple[Callable[[int], int], str, str | None]] = {
    "up to 4": (lambda n: div_ceil(n, 4) * 4, "rounded up to a multiple of 4", None),
    "none": (
        lambda n: n,
        "not padded",
        "you did not round up to a multiple of 4 (the copy_block_offsets kernel)",
    ),
    "always +4": (
        lambda n: (n // 4 + 1) * 4,
        "(n // 4 + 1) * 4",
        "your rounding adds 4 to a count that is already a multiple of 4 "
        "((n // 4 + 1) * 4); round up only what is not: ceil(n / 4) * 4",
    ),
    "down to 4": (
        lambda n: n // 4 * 4,
        "padded down to a multiple of 4",
        f"you padded down to a multiple of 4: {PAD}",
    ),
    "nearest 4": (
        lambda n: round(n / 4) * 4,  # ties to even
        "padded to the nearest multiple of 4",
        f"you padded to the nearest multiple of 4: {PAD}",
    ),
    "nearest 4, ties up": (
        lambda n: (n + 2) // 4 * 4,
        "padded to the nearest multiple of 4",
        f"you padded to the nearest multiple of 4: {PAD}",
    ),
    "up to 8": (
        lambda n: div_ceil(n, 8) * 8,
        "rounded up to a multiple of 8",
        "you rounded up to a multiple of 8; the row is padded to a multiple of 4",
    ),
}


@dataclass(frozen=True)
class WidthSlips:
    """One way of computing the width: the rule when every field is at its default, else the
    typical slips it makes, each one step of the rule done differently."""

    plus_one: bool = True
    extra: bool = True
    draft: bool = True
    division: str = "ceil"
    padding: str = "up to 4"

    def count(self) -> int:
        defaults = WidthSlips()
        return sum(getattr(self, f) != getattr(defaults, f) for f in self.__dataclass_fields__)

    def width(self, L: int, t: int, e: int, d: int) -> int:
        blocks = DIVISIONS[self.division][0](self._tokens(L, e, d), t)
        return PADDINGS[self.padding][0](blocks)

    def _tokens(self, L: int, e: int, d: int) -> int:
        return L + e * self.extra + d * self.draft + self.plus_one

    def names(self, e: int, d: int) -> list[str]:
        """The hints for this way's slips that can show on a case with e extra, d draft."""
        left_out = [
            (not self.plus_one, "you forgot the +1 decode token"),
            (not self.extra and e > 0, f"you left out the extra KV tokens ({e:,})"),
            (not self.draft and d > 0, f"you left out the draft tokens ({d:,})"),
        ]
        return [name for slipped, name in left_out if slipped] + [
            name
            for name in (DIVISIONS[self.division][1], PADDINGS[self.padding][2])
            if name is not None
        ]

    def worked(self, L: int, t: int, e: int, d: int) -> str:
        """The numbers this way computes, as the worked answer shows them."""
        terms = (
            [f"{L:,}"]
            + [f"{n:,}" for n, used in ((e, self.extra), (d, self.draft)) if used]
            + ["1"] * self.plus_one
        )
        blocks = DIVISIONS[self.division][0](self._tokens(L, e, d), t)
        return (
            f"{self.division}(({'+'.join(terms)})/{t})={blocks:,} -> "
            f"{PADDINGS[self.padding][1]}: {self.width(L, t, e, d):,}"
        )


#: Every combination of the typical slips, fewest first.
WIDTH_WAYS = sorted(
    (
        WidthSlips(plus_one, extra, draft, division, padding)
        for plus_one, extra, draft in itertools.product((True, False), repeat=3)
        for division in DIVISIONS
        for padding in PADDINGS
    ),
    key=WidthSlips.count,
)


def _width_case(fn, answer, label, L, t, e, d, ways: list[WidthSlips], above: list[str]):
    """The pass line if ``answer`` (fn's (value, failure) on this case) is right, else its
    feedback; ``ways``: the ways (combinations of slips) that give fn's answer on every case;
    ``above``: the diagnosis of the failing case above, which this case replaces with its own."""
    expected = max_blocks_per_seq(L, t, e, d)
    call = f"page_index_width({L}, {t}, {e}, {d})"
    got, failure = answer
    if failure:
        return failure
    if isinstance(got, bool) or not isinstance(got, int):
        return f"{label}: {call} returned {got!r} ({type(got).__name__}); return an int number of entries"
    if got == expected:
        return Passed(f"{label}: {call} = {expected}")
    rule = f"the rule's {WidthSlips().worked(L, t, e, d)}"
    if len(ways) == 1:
        slips = ways[0].names(e, d)
        name, worked = "; ".join(slips), f": yours {ways[0].worked(L, t, e, d)}; {rule}"
        same = f"the same slip{'s' * (len(slips) > 1)} as above"
    elif len(ways) == 2:
        # one function, two explanations (no case can tell them apart): name both, neither as
        # the one the code makes, the one with fewer slips first (_width_ways' order)
        first, second = (" and ".join(way.names(e, d)) for way in ways)
        name = f"either {first}, or {second} (the two give the same numbers on every input)"
        yours = ", or ".join(way.worked(L, t, e, d) for way in ways)
        worked, same = f": yours {yours}; {rule}", "the same two explanations as above"
    else:
        name = "none of the usual slips gives your answers: check each of Part 1's three rules"
        worked, same = f": yours {got:,}; {rule}", "the same as above: none of the usual slips"
    said, above[:] = above[-1:], [name]
    if said == [name]:  # a diagnosis in full once: the failing cases right after say the same
        name = same
    head = f"{label}: {call} returned {got:,}, expected {expected:,} - {name}"
    return Hint(head, head + worked, part=fn)  # the function, not the seed lengths beside it


def _width_ways(answers: list) -> list[WidthSlips]:
    """The combinations of typical slips that give the answers on every case answered with an
    int, fewest slips first, one per set of hints and none that only adds slips cancelling each
    other ((n // t // 4 + 1) * 4 is the rule): a multi-slip answer gets each of its slips named
    on every case, and none it does not make (the spot checks tell the ways apart)."""
    fits: dict[tuple[str, ...], WidthSlips] = {}
    for way in WIDTH_WAYS:
        if all(
            not isinstance(a, int) or isinstance(a, bool) or way.width(L, t, e, d) == a
            for a, (_, L, t, e, d) in zip(answers, WIDTH_CASES)
        ):
            names = way.names(1, 1)
            if not any(set(kept).issubset(names) for kept in fits):  # slips that cancel out
                fits[tuple(names)] = way
    return list(fits.values())


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
    # the learner's function once a case (a print in it shows once)
    answers = [
        call_learner(fn, L, t, e, d, where=f"{label}: page_index_width({L}, {t}, {e}, {d}) ")
        for label, L, t, e, d in WIDTH_CASES
    ]
    ways, above = _width_ways([value for value, _ in answers]), list[str]()
    outcomes = [
        _width_case(fn, answer, *case, ways, above) for answer, case in zip(answers, WIDTH_CASES)
    ]
    cases = len(WIDTH_CASES)
    if seed_max_seq_len is not None:
        outcomes += _seed_cases(fn, seed_max_seq_len)
        cases += 2
    answer, learner = (fn, seed_max_seq_len), learner_name(fn)
    return finish("check_page_index_width", outcomes, strict, reveal, answer, learner, cases)
