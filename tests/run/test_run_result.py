"""kvlab.run.run_result: a rank's and a run's statuses and reasons are derived from the requests
and from how the rank ended, never stored beside them."""

from __future__ import annotations

import dataclasses

import pytest

from kvlab.core.cause import Cause, Reason
from kvlab.core.request import Request, RequestState
from kvlab.core.v2_storage import dense_pages
from kvlab.run.rank_config import scenario_config
from kvlab.run.run_result import (
    DistributedResult,
    Outcome,
    RankFailure,
    RankRunStatus,
    not_routed,
    rank_result,
)
from kvlab.run.scenarios import load_scenario


@pytest.fixture(scope="module")
def config():
    return scenario_config(load_scenario("issue-21470"), 2)


def _request(request_id: str, state: RequestState, reason: Reason | None = None) -> Request:
    request = Request(request_id, prompt_len=8, max_new_tokens=1)
    request.state, request.reason = state, reason
    return request


FINISHED = Reason(Cause.FINISHED, dict(step=3))
SUSPENDED = Reason(Cause.STILL_RUNNING, dict(state="suspended"))


def _requests():
    return [
        _request("done", RequestState.FINISHED, FINISHED),
        _request("live", RequestState.SUSPENDED, SUSPENDED),
        _request("new", RequestState.WAITING, Reason(Cause.NOT_SUBMITTED)),
    ]


@pytest.mark.parametrize(
    "outcome, error, live_status, live_reason",
    [
        (Outcome.FINISHED, None, RequestState.RUNNING, SUSPENDED),
        (Outcome.RAISED, "ValueError: x", RequestState.RUNNING, SUSPENDED),
        (
            Outcome.SHUT_DOWN,
            "shut down: rank 1 raised ValueError: x",
            RequestState.RUNNING,
            Reason(Cause.RANK_STOPPED, dict(step=7), "shut down: rank 1 raised ValueError: x"),
        ),
        (
            Outcome.DIED,
            "died at step 7, 1.0 s into the run (exit code 17)",
            RankRunStatus.LOST,
            Reason(
                Cause.LOST_WITH_ITS_RANK,
                dict(rank=0),
                "died at step 7, 1.0 s into the run (exit code 17)",
            ),
        ),
    ],
)
def test_a_ranks_statuses_and_reasons_follow_its_requests_and_its_end(
    config, outcome, error, live_status, live_reason
):
    result = rank_result(config, 0, outcome=outcome, error=error, requests=_requests(), end_step=7)
    assert result.status == {
        "done": RequestState.FINISHED,
        "live": live_status,
        "new": RequestState.WAITING if live_status != RankRunStatus.LOST else RankRunStatus.LOST,
    }
    assert result.reasons["done"] == FINISHED  # a finished request keeps its own
    assert result.reasons["live"] == live_reason
    assert result.local_blocks == dense_pages(config.budgets[0].kv_quota_bytes, config.geometry)


def test_a_run_derives_its_end_and_the_requests_no_rank_received(config):
    ranks = (
        rank_result(config, 0, outcome=Outcome.DIED, error="died at step 2, 0.5 s into the run"),
        rank_result(config, 1, outcome=Outcome.SHUT_DOWN, error="shut down: rank 0 died"),
    )
    failure = RankFailure(rank=0, kind=Outcome.DIED, step=2, at_s=0.5, detail="exit code 17")
    result = DistributedResult(
        ranks=ranks,
        mode="process",
        backend="gloo",
        policy=config.policy,
        wall_s=1.0,
        startup_s=0.25,
        failures=(failure,),
        not_routed=not_routed(config, ranks),
    )
    assert result.ended == Outcome.DIED and result.engine_down and result.work_s == 0.75
    assert len(result.unrouted) == len(config.requests)  # no rank held any request
    outcomes = result.request_outcomes()
    assert {status for _, status, _ in outcomes.values()} == {RankRunStatus.NOT_ROUTED}
    assert all(
        why is not None and why.cause is Cause.NOT_ROUTED and why.message == failure.describe()
        for _, _, why in outcomes.values()
    )
    finished = dataclasses.replace(ranks[0], outcome=Outcome.FINISHED, error=None)
    assert dataclasses.replace(result, ranks=(finished, finished)).ended == Outcome.COMPLETED
