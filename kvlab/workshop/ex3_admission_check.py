"""Exercise 3: an admission check, PR #21720's per-request feasibility (kvlab/sched/admission.py
``CapacityAdmission``; docs/REFERENCE.md §4), then the same as a Scheduler policy.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from kvlab.analysis.presets import seed_geometry
from kvlab.analysis.sentences import sentence
from kvlab.core.cause import Reason
from kvlab.core.manager import KVCacheManager
from kvlab.core.memory import MIB
from kvlab.core.request import Request, RequestState
from kvlab.sched.admission import (
    FITS_NOW,
    NEVER_FITS,
    TEMPORARILY_BLOCKED,
    AdmissionPolicy,
    CapacityAdmission,
    demand_blocks,
)
from kvlab.workshop.ex1_page_index_width import SEED_MAX_SEQ_LEN
from kvlab.workshop.feedback import NOT_YET, CheckResult, Hint, Passed, call_learner, finish


def _seed_manager(
    policy: str = "configured",
    quota_mib: float = 4,
    max_batch_size: int = 4,
    busy_blocks: int = 0,
    fill_slots: bool = False,
    **kwargs,
) -> KVCacheManager:
    """The seed's manager, with ``busy_blocks`` pages already held by another sequence, or
    (``fill_slots``) every page-index slot held by a one-page sequence."""
    mgr = KVCacheManager.expecting_clamp(
        geometry=seed_geometry(),
        quota_bytes=int(quota_mib * MIB),
        max_seq_len=SEED_MAX_SEQ_LEN,
        max_batch_size=max_batch_size,
        page_index_policy=policy,
        **kwargs,
    )
    for i in range(max_batch_size if fill_slots else 0):
        mgr.create_cache(f"other-{i}").resize(mgr.tokens_per_block)
    if busy_blocks:
        assert mgr.create_cache("other").resize(busy_blocks * mgr.tokens_per_block)
    return mgr


#: The hint for a request called "never fits" that only waits for pages or slots others hold.
PRESSURE_AS_NEVER = (
    "pages and page-index slots held by other requests come back when they finish: "
    "is this a 'never'?",
    "pages and slots held by others are temporary pressure: never-fits is judged "
    "against the TOTAL pages and the row's span",
)

#: (label, manager settings, request, {the wrong class returned (None: any other): (the hint, a
#: question with no formula; what the case teaches, revealed with the worked numbers)})
ADMISSION_CASES = [
    (
        "the seed's 8,192-token request",
        dict(policy="clamped"),
        Request("big", 8192, 16),
        {
            None: (
                "can any amount of waiting make this request fit this pool?",
                "demand beyond the pool's total pages can never fit",
            )
        },
    ),
    (
        "the prompt fits, the whole request does not",
        {},
        Request("long-output", 2000, 100),
        {
            None: (
                "a request keeps growing after its prompt: what does it hold when it completes?",
                "demand counts every token the request holds when it completes: prompt + max_new_tokens",
            )
        },
    ),
    (
        "exactly the whole pool",
        {},
        Request("exact", 2048, 0),
        {
            NEVER_FITS: (
                "look at the boundary: is a request that needs exactly what the pool has too big?",
                "a request that needs exactly the total pages fits (> total, not >=)",
            ),
            TEMPORARILY_BLOCKED: (
                "look at the boundary: must a request whose pages are exactly the free ones wait?",
                "a context that needs exactly the free pages fits now (<= free, not <)",
            ),
        },
    ),
    (
        "one token over the pool",
        {},
        Request("over", 2048, 1),
        {
            None: (
                "its prompt fills the pool's pages exactly: what does it hold when it completes, and how "
                "many pages does one token more take?",
                "one token more than the pool's 2,048 needs a 65th page",
            )
        },
    ),
    (
        "the pool is busy",
        dict(busy_blocks=40),
        Request("busy", 1024, 64),
        {
            NEVER_FITS: (
                "pages held by other requests come back when they finish: is this a 'never'?",
                "pages held by others are temporary pressure: never-fits is judged against the "
                "TOTAL pages",
            ),
            FITS_NOW: (
                "look at the free pages: can this request's context start right now?",
                "fits now needs the context's pages free now; they are not, so it waits",
            ),
        },
    ),
    (
        "the pool is busy, but it fits in what is free",
        dict(busy_blocks=40),
        Request("small", 512, 64),
        {
            TEMPORARILY_BLOCKED: (
                "which part of the request must find its pages free right now, and which "
                "comes later?",
                "fits now: the context's pages are free now (the output grows later)",
            ),
            NEVER_FITS: PRESSURE_AS_NEVER,
        },
    ),
    (
        "the pool is busy: its context fits in what is free, its output not yet",
        dict(busy_blocks=40),
        Request("grows-later", 512, 320),
        {
            TEMPORARILY_BLOCKED: (
                "its context fits in the free pages now, its output not yet: must the "
                "output's pages be free before the request starts?",
                "you compared the whole request (context and output) with the free "
                "pages: only the context's pages must be free now, the output grows "
                "later as pages come back",
            ),
            NEVER_FITS: PRESSURE_AS_NEVER,
        },
    ),
    (
        "every page-index slot is taken",
        dict(max_batch_size=1, fill_slots=True),
        Request("no-slot", 256, 32),
        {
            FITS_NOW: (
                "pages are not all a new sequence takes from the manager: what else must be free "
                "for it?",
                "no free page-index slot is temporary too: one comes back when a sequence ends",
            ),
            NEVER_FITS: PRESSURE_AS_NEVER,
        },
    ),
    (
        "a big pool, a request past the row",
        dict(quota_mib=64),
        Request("past-row", 8192, 300),
        {
            None: (
                "the pool is big enough here: is there another fixed limit on the pages one sequence "
                "can address?",
                "the page-index span (max_blocks_per_seq) is a fixed budget too: demand beyond it "
                "never fits",
            )
        },
    ),
    (
        "extra KV tokens",
        dict(num_extra_kv_tokens=32),
        Request("extra", 2016, 16),
        {
            None: (
                "this manager adds something to every sequence's tokens: look again at what you may read",
                "demand includes the manager's num_extra_kv_tokens",
            )
        },
    ),
    (
        "draft tokens",
        {},
        Request("draft", 2000, 40, num_draft_tokens=16),
        {
            None: (
                "this request carries more than prompt and output: look again at what you may read",
                "demand includes the request's num_draft_tokens",
            )
        },
    ),
]

CLASSES = (FITS_NOW, TEMPORARILY_BLOCKED, NEVER_FITS)


def _manager_facts(mgr: KVCacheManager) -> str:
    """What the learner can read off the manager (no demand, no formula)."""
    return (
        f"pool {mgr.total_blocks:,} total, {mgr.free_blocks:,} free; row {mgr.max_blocks_per_seq:,} "
        f"entries; {mgr.page_index.free_slots:,} free slots"
    )


def _admission_numbers(request: Request, mgr: KVCacheManager) -> str:
    """The worked demand with the manager's numbers: shown on a pass and on a reveal."""
    r, extra = request, mgr.num_extra_kv_tokens
    tokens = r.prompt_len + r.max_new_tokens + extra + r.num_draft_tokens
    return (
        f"demand ceil(({r.prompt_len:,} prompt + {r.max_new_tokens:,} new + {extra:,} extra + "
        f"{r.num_draft_tokens:,} draft) / {mgr.tokens_per_block}) = "
        f"{mgr.geometry.blocks_for_tokens(tokens):,} blocks; {_manager_facts(mgr)}"
    )


def _admission_case(classify, label, settings, request, hints):
    """classify's outcome on one case: its feedback, or the pass line."""
    mgr = _seed_manager(**settings)
    expected, _ = CapacityAdmission().classify(request, mgr)
    free_before, caches_before, facts = mgr.free_blocks, len(mgr.caches), _manager_facts(mgr)
    got, failure = call_learner(classify, replace(request), mgr, where=f"{label}: classify ")
    numbers = _admission_numbers(request, mgr)
    if failure:
        return failure
    if not (isinstance(got, tuple) and len(got) == 2):
        return f"{label}: classify returned {got!r}; return a pair (class, reason)"
    verdict, reason = got
    if isinstance(reason, Reason):  # kvlab's own classify records a cause; a learner writes words
        reason = sentence(reason)
    if mgr.free_blocks != free_before or len(mgr.caches) != caches_before:
        return (
            f"{label}: classify changed the manager ({free_before} -> {mgr.free_blocks} "
            "free blocks); an admission check only reads"
        )
    if verdict not in CLASSES:
        return f"{label}: class {verdict!r} is not one of {list(CLASSES)}"
    if verdict != expected:
        wrong = f"{label}: expected {expected!r}, got {verdict!r}"
        question, lesson = hints.get(verdict) or hints[None]
        given = (
            f"{request.prompt_len:,} prompt, {request.max_new_tokens:,} max_new_tokens, "
            f"{request.num_draft_tokens:,} draft; {mgr.num_extra_kv_tokens:,} extra KV tokens, "
            f"{facts}"
        )
        return Hint(f"{wrong} - {question} ({given})", f"{wrong} - {lesson} ({numbers})")
    if verdict == NEVER_FITS:
        named, demand = _numbers_in(reason), demand_blocks(request, mgr)
        if demand not in named or not named & {mgr.total_blocks, mgr.max_blocks_per_seq}:
            return _reason_feedback(label, reason, request, mgr)
    if verdict != FITS_NOW and not (isinstance(reason, str) and reason.strip()):
        return f"{label}: right class, but give a reason: why must it wait?"
    return Passed(f"{label}: {verdict!r} ({numbers})")


def check_admission(
    classify: Callable[[Request, KVCacheManager], tuple],
    *,
    strict: bool = False,
    reveal: bool | None = None,
) -> CheckResult:
    """Exercise 3a: ``classify(request, manager) -> (class, reason)`` against
    ``CapacityAdmission.classify`` on ADMISSION_CASES; a "never fits" reason states the numbers,
    and the manager is left as it was."""
    outcomes = [_admission_case(classify, *case) for case in ADMISSION_CASES]
    return finish("check_admission", outcomes, strict, reveal, classify)


def _numbers_in(reason) -> set:
    """The whole numbers a reason names, with or without thousands separators."""
    text = reason if isinstance(reason, str) else ""
    return {int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", text)}


def _reason_feedback(label: str, reason, request: Request, mgr: KVCacheManager) -> Hint:
    """A right "never fits" whose reason lacks the numbers: a question about the numbers it
    names instead (the prompt's blocks alone, what is free now), then the numbers."""
    named, demand = _numbers_in(reason), demand_blocks(request, mgr)
    prompt_blocks = mgr.geometry.blocks_for_tokens(request.prompt_len)
    wrong = (
        f"{label}: right class, but the reason {reason!r} should give the blocks the request "
        "needs and the fixed limit it exceeds"
    )
    questions = []
    if demand not in named:
        questions.append(
            f"{prompt_blocks:,} blocks are what the prompt alone takes: what does the request "
            "hold when it completes?"
            if prompt_blocks in named
            else "how many blocks does the request need when it completes?"
        )
    if isinstance(reason, str) and "free" in reason.lower():
        questions.append("is what is free now the limit a 'never' is judged against?")
    elif not named & {mgr.total_blocks, mgr.max_blocks_per_seq}:
        questions.append("which fixed limit does it exceed?")
    return Hint(
        f"{wrong} - " + " ".join(q[0].upper() + q[1:] for q in questions),
        f"{wrong}: {demand:,} blocks when it completes ({_admission_numbers(request, mgr)}), "
        f"and {mgr.total_blocks:,} total blocks or a {mgr.max_blocks_per_seq:,}-entry row, not "
        "what is free now",
    )


#: Exercise 3b's workload: two requests that do not fit together (the second waits), one that
#: can never fit, and a small one after it.
ADMISSION_WORKLOAD = [
    Request("s1", 1536, 32),
    Request("s2", 1536, 32, arrival_step=1),
    Request("big", 8192, 16, arrival_step=2),
    Request("s3", 256, 32, arrival_step=3),
]


def run_admission_workload(admission, policy: str = "configured", stall_limit: int = 1000):
    """ADMISSION_WORKLOAD through kvlab's Scheduler on the seed's pool under ``admission`` (a
    name or an AdmissionPolicy); returns the SimulationResult."""
    from kvlab.run.simulation import simulate
    from kvlab.sched.scheduler import Scheduler

    sched = Scheduler(
        _seed_manager(policy),
        admission=admission,
        max_num_tokens=8192,
        max_batch_size=8,
        stall_limit=stall_limit,
    )
    return simulate(sched, ADMISSION_WORKLOAD, max_steps=5000)


FIND_THE_HOOK = (
    "which hook of an AdmissionPolicy runs when a request arrives, and what can it "
    "return? (kvlab/sched/admission.py's module docstring)"
)
THE_HOOK = "in admit(), return Verdict(False, reason) when classify says 'never fits'"


def _workload_outcome(policy: AdmissionPolicy, width: str):
    """The pass line if the run rejected 'big' with its numbers and finished the rest, else the
    feedback."""
    try:
        result = run_admission_workload(policy, width)
    except NotImplementedError:
        return NOT_YET
    except Exception as exc:
        return f"{width} row: the run raised {type(exc).__name__}: {exc}"
    status = ", ".join(f"{k} {v}" for k, v in result.status.items())
    big = sentence(result.reasons["big"])
    if result.error is not None:
        stopped = (
            f"{width} row: the engine stopped at step {result.end_step - 1:,} with "
            f"{type(result.error).__name__} ({status})"
        )
        return Hint(
            f"{stopped} - 'big' can never fit this pool and should have been "
            f"rejected when it arrived: {FIND_THE_HOOK}",
            f"{stopped} - 'big' needs 257 blocks, the pool has 64: it should "
            f"have been rejected when it arrived: {THE_HOOK}",
        )
    if result.status["big"] is not RequestState.REJECTED:
        not_rejected = f"{width} row: 'big' is '{result.status['big']}' ({status})"
        return Hint(
            f"{not_rejected}; it can never fit: reject it when it arrives - {FIND_THE_HOOK}",
            f"{not_rejected}; reject it {THE_HOOK}",
        )
    if any(result.status[r] is not RequestState.FINISHED for r in ("s1", "s2", "s3")):
        return (
            f"{width} row: {status} - only 'big' can never fit; 's2' is only "
            "temporarily blocked behind 's1' and must wait, not be rejected"
        )
    if not ("257" in big and "64" in big):
        unnamed = f"{width} row: 'big' was rejected, but its reason {big!r}"
        return Hint(
            f"{unnamed} should state the numbers: the blocks it needs and the limit it exceeds",
            f"{unnamed} should name the 257 blocks it needs and the pool's 64",
        )
    return Passed(f"{width} row: {status}; 'big': {big}")


def check_admission_policy(
    policy: AdmissionPolicy, *, strict: bool = False, reveal: bool | None = None
) -> CheckResult:
    """Exercise 3b: ``policy`` plugged into the Scheduler runs ADMISSION_WORKLOAD on the seed's
    pool under both row widths: "big" is rejected at arrival with the numbers, the engine never
    stops, everything else finishes."""
    if not isinstance(policy, AdmissionPolicy):
        wrong = f"pass an instance of your AdmissionPolicy subclass, got {type(policy).__name__}"
        return finish("check_admission_policy", [wrong], strict, reveal, policy)
    outcomes = [_workload_outcome(policy, width) for width in ("clamped", "configured")]
    learner = f"{type(policy).__name__}.admit"
    return finish("check_admission_policy", outcomes, strict, reveal, policy, learner)
