"""kvlab's own words for what happened to a request: one sentence per :class:`Cause`, written
from the numbers the engine recorded (``kvlab.core.cause``), and a multi-rank run's report. The
engine composes no text; an engine's own message is kept as the engine writes it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

from kvlab.core.cause import Cause, Reason
from kvlab.core.words import a_or_an, counted
from kvlab.run.run_result import DistributedResult

Numbers = Mapping[str, int | str | bool | None]


def _finished(n: Numbers) -> str:
    if "generated" not in n:  # a dead rank's record kept only the step
        return f"finished at step {n['step']}"
    prompt = f"{n['prompt_len']:,}"
    sentence = (
        f"finished at step {n['step']:,}: {counted(int(n['generated'] or 0), 'token')} generated "
        f"after {a_or_an(prompt)} {prompt}-token prompt"
    )
    if n.get("stopped_at") is not None:  # vLLM's max_model_len, SGLang's clip
        sentence += (
            f", stopped short of max_new_tokens={n['max_new_tokens']:,} by the engine's length "
            f"limit at {n['stopped_at']:,} tokens (finish reason 'length')"
        )
    return sentence


def _demand(n: Numbers, limit: str) -> str:
    return (
        f"Request requires {n['demand']} KV cache blocks to complete, which exceeds {limit} "
        f"({n['prompt_len']:,} prompt + {n['max_new_tokens']:,} new tokens at "
        f"{n['tokens_per_block']} tokens per block)"
    )


def where(reason: Reason, passes: bool = True) -> str:
    """Where an unfinished request was, in words (a waiting one's scheduling passes too, unless
    ``passes`` is False)."""
    cause, n = reason.cause, reason.numbers
    if cause is Cause.STILL_WAITING:
        refusals = int(n["refusals"] or 0)
        tried = (
            f"refused in {counted(refusals, 'scheduling pass')}; "
            if refusals
            else "not refused by any scheduling pass before the run ended; "
        )
        return (
            f"{tried if passes else ''}its context of {n['context_len']:,} tokens needs "
            f"{n['pages']:,} pages, the pool has {n['total_blocks']:,}, {n['free_blocks']:,} of "
            "them free when the run ended"
        )
    if cause is Cause.STILL_RUNNING:
        held = "suspended, its pages held, after " if n["state"] == "suspended" else ""
        return f"{held}{n['generated']:,} of {n['max_new_tokens']:,} tokens generated"
    if cause is Cause.STILL_QUEUED:
        return (
            f"in the executor's queue since step {n['arrival_step']:,}, behind "
            f"{n['max_num_active_requests']:,} active requests (max_num_active_requests)"
        )
    return f"it arrives at step {n['arrival_step']:,}"


def _unfinished(reason: Reason) -> str:
    cause, n = reason.cause, reason.numbers
    if "error" in n:
        culprit = " raised by this request" if n["raised_by_this_request"] else ""
        return (
            f"engine stopped at step {n['stopped_at_step']:,} by {n['error']}{culprit} "
            f"({where(reason)}): {reason.message}"
        )
    if cause is Cause.STILL_QUEUED:
        return f"still queued when the run ended at max_steps={n['max_steps']}: {where(reason)}"
    if cause is Cause.NOT_SUBMITTED:
        return f"not submitted: {where(reason)}, and the run ended at max_steps={n['max_steps']}"
    ended = f"still {n['state']} when the run ended at max_steps={n['max_steps']}"
    if "engine" in n:  # a real engine reports no pages
        return f"{ended} ({n['engine']} has no stall detector)"
    return f"{ended}: {where(reason)}"


SENTENCES: dict[Cause, Callable[[Reason], str]] = {
    Cause.FINISHED: lambda r: _finished(r.numbers),
    Cause.FRONT_DOOR: lambda r: r.message,
    Cause.ABORTED_OUT_OF_MEMORY: lambda r: r.message,
    Cause.REJECTED_BY_ENGINE: lambda r: r.message,
    Cause.REJECTED_BY_POLICY: lambda r: r.message,
    Cause.STEP_OVER_TOKEN_BUDGET: lambda r: (
        f"a generation step needs {r.numbers['step_tokens']} tokens (1 + "
        f"{r.numbers['num_draft_tokens']} draft), more than "
        f"max_num_tokens={r.numbers['max_num_tokens']}: it would never be scheduled"
    ),
    Cause.CONTEXT_OVER_TOKEN_BUDGET: lambda r: (
        f"its context needs {r.numbers['context_tokens']} tokens in one pass "
        f"({r.numbers['prompt_len']} prompt + {r.numbers['num_draft_tokens']} draft) without "
        f"chunked prefill, more than max_num_tokens={r.numbers['max_num_tokens']}: it would "
        "never be scheduled"
    ),
    Cause.DEMAND_OVER_POOL: lambda r: _demand(
        r.numbers, f"the total capacity of {r.numbers['total_blocks']} blocks"
    ),
    Cause.DEMAND_OVER_PAGE_INDEX: lambda r: _demand(
        r.numbers, f"the page-index span of {r.numbers['max_blocks_per_seq']} entries"
    ),
    Cause.TEMPORARILY_BLOCKED: lambda r: (
        f"its context needs {r.numbers['first_blocks']:,} blocks, "
        f"{r.numbers['free_blocks']:,} are free and {r.numbers['free_slots']:,} page-index "
        "slots; retried as pages come back"
    ),
    Cause.ENGINE_REFUSED_TO_START: lambda r: f"the engine refused to start: {r.message}",
    Cause.STILL_WAITING: _unfinished,
    Cause.STILL_RUNNING: _unfinished,
    Cause.STILL_QUEUED: _unfinished,
    Cause.NOT_SUBMITTED: _unfinished,
    Cause.ENGINE_PROCESS_STOPPED: lambda r: (
        f"the {r.numbers['engine']} process stopped at step {r.numbers['step']} with this "
        f"request {r.numbers['state']}: {r.message}"
    ),
    Cause.ENDED_ON_A_LOST_RANK: lambda r: (
        f"rejected at step {r.numbers['step']} (its reason was lost with rank {r.numbers['rank']})"
    ),
    Cause.LOST_WITH_ITS_RANK: lambda r: f"lost: rank {r.numbers['rank']} {r.message}",
    Cause.RANK_STOPPED: lambda r: f"{r.message} (at step {r.numbers['step']})",
    Cause.NOT_ROUTED: lambda r: (
        f"not routed: the run ended at step {r.numbers['end_step']} ({r.message}); it arrives "
        f"at step {r.numbers['arrival_step']}"
    ),
}


def sentence(reason: Reason | None) -> str:
    """``reason`` in kvlab's words ("" for none: a request still unjudged)."""
    return "" if reason is None else SENTENCES[reason.cause](reason)


#: A few words for the causes whose sentence quotes an engine's whole message, for a line
#: that names the request beside the pass quoting it.
BRIEF: dict[Cause, Callable[[Reason], str]] = {
    Cause.DEMAND_OVER_POOL: lambda r: (
        f"it needs {r.numbers['demand']:,} KV cache blocks, more than the pool's "
        f"{r.numbers['total_blocks']:,}"
    ),
    Cause.DEMAND_OVER_PAGE_INDEX: lambda r: (
        f"it needs {r.numbers['demand']:,} KV cache blocks, more than its page-index row's "
        f"{r.numbers['max_blocks_per_seq']:,} entries"
    ),
}


def brief(reason: Reason | None) -> str:
    """``reason`` in a few words (:data:`BRIEF`), else :func:`sentence`."""
    if reason is not None and reason.cause in BRIEF:
        return BRIEF[reason.cause](reason)
    return sentence(reason)


def sentences(reasons: Mapping[str, Reason | None]) -> dict[str, str]:
    """Request id -> its reason in words."""
    return {request_id: sentence(reason) for request_id, reason in reasons.items()}


def explain_run(result: DistributedResult) -> str:
    """A multi-rank run in words: the headline, the rank table, the requests by status (the
    first five that no rank received, each with its reason), the fault and the timing."""
    counts = Counter(status for _, status, _ in result.request_outcomes().values())
    unrouted = sorted(result.unrouted.items())[:5]
    lines = [
        result.headline,
        result.table(),
        f"requests: {sum(counts.values())} ("
        + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        + ")",
        *[f"  {request_id}: {sentence(why)}" for request_id, why in unrouted],
    ]
    if result.fault is not None:
        fired = "fired" if result.fault_fired else "did not fire (the run never reached it)"
        lines.append(f"fault: {result.fault!r} {fired}")
    timing = (
        f"wall {result.wall_s:.2f} s (startup {result.startup_s:.2f} s, work {result.work_s:.2f} s)"
    )
    if result.timeout_s is not None:
        timing += f", timeout_s={result.timeout_s:g}"
    if result.deadline_s is not None:
        timing += f", deadline_s={result.deadline_s:g}"
    return "\n".join([*lines, timing])


__all__ = ["SENTENCES", "explain_run", "sentence", "sentences", "where"]
