"""Why a request ended as it did, as the engine records it: a :class:`Cause` and its numbers.
The engine writes no sentence; ``kvlab.analysis.sentences`` writes one from these. An engine's
own message (vLLM's front door, TensorRT-LLM's LLM API check, a real engine's words) is kept as
the engine writes it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Cause(StrEnum):
    """What ended a request, or where it was when the run ended."""

    #: it generated its last token (numbers: step, and what it generated when known)
    FINISHED = "finished"
    #: turned away at an engine's front door; the engine's message
    FRONT_DOOR = "front door"
    #: a generation step needs more tokens than the token budget ever gives (kvlab's own check)
    STEP_OVER_TOKEN_BUDGET = "step over the token budget"
    #: an unchunked context needs more tokens than the token budget ever gives (kvlab's own check)
    CONTEXT_OVER_TOKEN_BUDGET = "context over the token budget"
    #: its demand exceeds the pool's total capacity (PR #21720's capacity check)
    DEMAND_OVER_POOL = "demand over the pool"
    #: its demand exceeds the page-index row (PR #21720's capacity check)
    DEMAND_OVER_PAGE_INDEX = "demand over the page-index row"
    #: its first chunk does not fit the free pages or slots now (reported, never acted on)
    TEMPORARILY_BLOCKED = "temporarily blocked"
    #: aborted by SGLang when decode memory ran out; the engine's message
    ABORTED_OUT_OF_MEMORY = "aborted out of memory"
    #: an admission policy of one's own turned it away; the policy's words
    REJECTED_BY_POLICY = "rejected by the policy"
    #: a real engine turned it away; the engine's message
    REJECTED_BY_ENGINE = "rejected by the engine"
    #: the engine refused to start (vLLM's, SGLang's start-up checks); the engine's message
    ENGINE_REFUSED_TO_START = "engine refused to start"
    #: still waiting in the scheduler when the run ended
    STILL_WAITING = "still waiting"
    #: still running (or suspended, its pages held) when the run ended
    STILL_RUNNING = "still running"
    #: still in the executor's queue, behind max_num_active_requests, when the run ended
    STILL_QUEUED = "still queued"
    #: the run ended before it arrived
    NOT_SUBMITTED = "not submitted"
    #: it ended on a rank that died, and the rank's record kept only the step
    ENDED_ON_A_LOST_RANK = "ended on a lost rank"
    #: unfinished on a rank that died or hung
    LOST_WITH_ITS_RANK = "lost with its rank"
    #: unfinished on a rank that stopped (a deadline, a peer's failure)
    RANK_STOPPED = "rank stopped"
    #: no rank received it: the run ended first
    NOT_ROUTED = "not routed"
    #: a real engine's process stopped with it unfinished; the error's message
    ENGINE_PROCESS_STOPPED = "engine process stopped"


@dataclass(frozen=True)
class Reason:
    """A cause, its numbers (names as the engine's fields say them) and, where an engine or an
    error wrote one, its message, verbatim."""

    cause: Cause
    numbers: Mapping[str, int | str | bool | None] = field(default_factory=dict)
    message: str = ""


__all__ = ["Cause", "Reason"]
