"""The closed form of :mod:`kvlab.run.distributed`, fast enough for a slider: each rank's pool,
each request's rank (routed with every earlier request live) and its verdict alone there; the
first crash, else stall, ends the run. [kvlab] Other requests' pages are left out; under chunked
prefill a chunk boundary past the pool can make a stall a crash.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvlab.analysis.phase import PhaseSetup, phase_verdicts
from kvlab.analysis.presets import ENGINE_OUTCOMES
from kvlab.core.checks import check_instance
from kvlab.core.memory import MemoryBudget
from kvlab.core.request import RequestState
from kvlab.run.rank_config import RunConfig
from kvlab.run.routing import route
from kvlab.run.run_result import DistributedResult

#: What the real run's rank says when a request's verdict ends the run.
ENGINE_ERROR = {
    "crash": "ValueError: User-provided base page indices is too short",
    "stall": "RuntimeError: V2 scheduler deadlock",
}


@dataclass(frozen=True)
class RankPlan:
    """One rank's pool before and after the MIN, named as in ``kvlab.run.rank.RankResult``."""

    rank: int
    budget: MemoryBudget
    local_quota_bytes: int
    local_blocks: int  # before the MIN
    blocks: int  # after the MIN: the pool it builds
    capacity_tokens: int
    quota_bytes: int  # the quota its pool uses after the MIN (model bytes)
    max_seq_len: int  # clamped
    max_blocks_per_seq: int

    @property
    def workspace_bytes(self) -> int:
        return self.budget.workspace_bytes


@dataclass(frozen=True)
class RequestPlan:
    """One request: its rank, the blocks it grows to, and its verdict alone there."""

    request_id: str
    tokens: int  # prompt + new
    rank: int
    blocks: int  # blocks of prompt + new tokens
    verdict: str  # "ok", "reject", "stall", "crash"


@dataclass(frozen=True)
class RanksPlan:
    """Every rank's pool, every request's verdict, and how the run will end."""

    policy: str
    configured_max_seq_len: int
    ranks: tuple[RankPlan, ...]
    requests: tuple[RequestPlan, ...]

    @property
    def first_failure(self) -> RequestPlan | None:
        """The request whose verdict ends the run: the first crash, else the first stall."""
        failures = [r for r in self.requests if r.verdict in ("crash", "stall")]
        return min(failures, key=lambda r: r.verdict != "crash", default=None)

    @property
    def outcome(self) -> str:
        """ "crash" or "stall" (the run shuts down), "reject" or "ok"."""
        failure = self.first_failure
        if failure is not None:
            return failure.verdict
        return "reject" if any(r.verdict == "reject" for r in self.requests) else "ok"

    @property
    def ended(self) -> str:
        """What ``DistributedResult.ended`` will say: "shut down" or "completed"."""
        return "shut down" if self.first_failure is not None else "completed"

    @property
    def reason(self) -> str:
        failure = self.first_failure
        if failure is None:
            rejected = sum(r.verdict == "reject" for r in self.requests)
            return (
                f"{rejected} request(s) rejected, the rest finish"
                if rejected
                else "every request fits its rank's pool and row"
            )
        return (
            f"rank {failure.rank} raises {ENGINE_ERROR[failure.verdict]} on {failure.request_id}; "
            "every rank shuts down"
        )

    @property
    def placement(self) -> dict[str, int]:
        return {r.request_id: r.rank for r in self.requests}


def plan_ranks(config: RunConfig) -> RanksPlan:
    """The plan of ``config`` (module docstring): no manager, no scheduler, no process."""
    check_instance("config", config, RunConfig)
    geo = config.geometry
    local_blocks, capacity, width = config.pool_plan()  # steps 1-3
    blocks, clamped = capacity // geo.tokens_per_block, min(config.max_seq_len, capacity)
    ranks = tuple(
        RankPlan(
            rank=rank,
            budget=budget,
            local_quota_bytes=budget.kv_quota_bytes,
            local_blocks=own,
            blocks=blocks,
            capacity_tokens=capacity,
            quota_bytes=blocks * geo.bytes_per_block,
            max_seq_len=clamped,
            max_blocks_per_seq=width,
        )
        for rank, (budget, own) in enumerate(zip(config.budgets, local_blocks))
    )
    placement = _placement(config)
    requests = []
    for request in sorted(config.requests, key=lambda q: q.arrival_step):
        setup = PhaseSetup(
            geometry=geo,
            max_seq_len=config.max_seq_len,
            max_new_tokens=request.max_new_tokens,
            max_num_tokens=(1 << 30) if config.chunked_prefill else config.max_num_tokens,
        )
        code = phase_verdicts([blocks], [request.prompt_len], config.policy, setup)[0, 0]
        tokens = request.prompt_len + request.max_new_tokens
        requests.append(
            RequestPlan(
                request_id=request.request_id,
                tokens=tokens,
                rank=placement[request.request_id],
                blocks=geo.blocks_for_tokens(tokens),
                verdict=ENGINE_OUTCOMES[code],
            )
        )
    return RanksPlan(config.policy, config.max_seq_len, ranks, tuple(requests))


def outcome_of(result) -> str | None:
    """A real run's outcome in the plan's words: "crash" (a rank raised ValueError), "stall"
    (another error), "reject", "ok", or None (a rank died or hung)."""
    check_instance("result", result, DistributedResult)
    raised = next((r for r in result.ranks if r.outcome == "raised"), None)
    if raised is not None:
        return "crash" if raised.error.startswith("ValueError") else "stall"
    if result.ended != "completed":
        return None
    statuses = [s for r in result.ranks for s in r.status.values()]
    return "reject" if RequestState.REJECTED in statuses else "ok"


def _placement(config: RunConfig) -> dict[str, int]:
    """Route each arrival step's requests as the ranks do, with every earlier request live."""
    live, tokens = [0] * config.world_size, [0] * config.world_size
    placement: dict[str, int] = {}
    by_step: dict[int, list] = {}
    for request in config.requests:
        by_step.setdefault(request.arrival_step, []).append(request)
    for step in sorted(by_step):
        new = by_step[step]
        assignment = route(new, live, tokens, config.pins)
        for request in new:
            rank = assignment[request.request_id]
            placement[request.request_id] = rank
            live[rank] += 1
            tokens[rank] += request.prompt_len
    return placement
