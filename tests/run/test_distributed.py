"""kvlab.run (distributed, supervisor, rank): 16 (and 2, 4) gloo rank processes on CPU, the in-process mode, the MIN
all-reduce, attention-DP routing, failure propagation, and no process outliving a run."""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
import signal
import threading
import time

import numpy as np
import pytest
import torch

from kvlab.analysis.sentences import explain_run, sentence
from kvlab.core.cause import Cause
from kvlab.core.request import Request
from kvlab.run import supervisor
from kvlab.run.distributed import run_ranks
from kvlab.run.rank import FAULT_EXIT_CODE, RankRunner
from kvlab.run.rank_config import Fault, rank_budget, scenario_config
from kvlab.run.routing import route
from kvlab.run.scenarios import load_scenario

NATIVE = "User-provided base page indices is too short"
SHUTDOWN = f"shut down: rank 0 raised ValueError: {NATIVE}"


@pytest.fixture(scope="module")
def scenario():
    return load_scenario("issue-21470")


def assert_no_survivors(result):
    assert multiprocessing.active_children() == []
    for pid in result.pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # reaped: no such process


@pytest.fixture(scope="module")
def clamped16(scenario):
    result = run_ranks(scenario_config(scenario, 16, "none/clamped"), progress=False)
    assert_no_survivors(result)
    return result


@pytest.fixture(scope="module")
def admission16(scenario):
    result = run_ranks(scenario_config(scenario, 16, "capacity"), progress=False)
    assert_no_survivors(result)
    return result


def test_min_reduction_gives_every_rank_the_smallest_capacity(clamped16):
    ranks = clamped16.ranks
    assert len(ranks) == 16 and len(set(clamped16.pids)) == 16
    local = [r.local_blocks * 32 for r in ranks]  # tokens before the MIN
    assert len({r.workspace_bytes for r in ranks}) == 16  # every rank's workspace differs
    assert len(set(local)) == 16
    assert {r.capacity_tokens for r in ranks} == {min(local)}
    assert {r.blocks for r in ranks} == {min(r.local_blocks for r in ranks)} == {29962}
    assert all(r.blocks <= r.local_blocks for r in ranks)  # no quota raised
    assert ranks[0].local_blocks > ranks[-1].local_blocks == ranks[0].blocks
    assert {r.max_seq_len for r in ranks} == {29962 * 32}  # clamped from 1048576
    assert {r.max_blocks_per_seq for r in ranks} == {29964}


def test_clamped_rank_0_raises_and_all_16_shut_down(clamped16):
    assert clamped16.ended == "shut down" and clamped16.engine_down
    r0 = clamped16.ranks[0]
    assert r0.outcome == "raised" and r0.error == f"ValueError: {NATIVE}"
    assert r0.status["long-ctx"] == "running"
    assert "kvlab/core/kv_cache.py" in r0.traceback and "resize_context" in r0.traceback
    assert r0.traceback.rstrip().splitlines()[-2].endswith(f"PageIndexTooShort: {NATIVE}")
    for r in clamped16.ranks[1:]:
        assert (r.outcome, r.error) == ("shut down", SHUTDOWN)
        assert r.traceback is None
    assert clamped16.reason.startswith(f"rank 0 raised ValueError: {NATIVE}")


def test_admission_rejects_on_its_rank_and_every_rank_finishes(admission16):
    assert admission16.ended == "completed" and not admission16.engine_down
    assert [r.outcome for r in admission16.ranks] == ["finished"] * 16
    r0 = admission16.ranks[0]
    assert r0.status["long-ctx"] == "rejected"
    long_ctx = r0.reasons["long-ctx"]
    assert long_ctx.cause is Cause.DEMAND_OVER_POOL and long_ctx.numbers["total_blocks"] == 29962
    statuses = [s for r in admission16.ranks for s in r.status.values()]
    assert statuses.count("finished") == 48 and statuses.count("rejected") == 1
    assert all("long-ctx" not in r.status for r in admission16.ranks[1:])  # pinned to rank 0


def test_background_requests_are_balanced_over_the_ranks(admission16):
    assert [sum(1 for k in r.status if k.startswith("bg-")) for r in admission16.ranks] == [3] * 16


@pytest.mark.parametrize("policy", ["none/clamped", "capacity"])
def test_in_process_gives_the_same_per_rank_results(scenario, clamped16, admission16, policy):
    by_process = {"none/clamped": clamped16, "capacity": admission16}[policy]
    in_process = run_ranks(scenario_config(scenario, 16, policy), in_process=True, progress=False)
    assert in_process.mode == "in-process" and in_process.pids == ()
    assert [dataclasses.asdict(r) for r in in_process.ranks] == [
        dataclasses.asdict(r) for r in by_process.ranks
    ]
    assert (in_process.ended, in_process.reason) == (by_process.ended, by_process.reason)


@pytest.mark.parametrize("ranks", [2, 4])
def test_smaller_worlds(scenario, ranks):
    result = run_ranks(scenario_config(scenario, ranks, "none/clamped"), progress=False)
    assert_no_survivors(result)
    assert len(result.ranks) == ranks and result.ended == "shut down"
    assert [r.outcome for r in result.ranks] == ["raised"] + ["shut down"] * (ranks - 1)
    assert len({r.capacity_tokens for r in result.ranks}) == 1
    assert result.ranks[0].blocks == min(r.local_blocks for r in result.ranks)


def test_configured_row_turns_the_crash_into_a_stall_that_still_takes_every_rank_down(scenario):
    result = run_ranks(
        scenario_config(scenario, 4, "none/configured", stall_limit=20),
        in_process=True,
        progress=False,
    )
    r0 = result.ranks[0]
    assert r0.outcome == "raised" and r0.error.startswith("RuntimeError: V2 scheduler deadlock")
    assert r0.max_blocks_per_seq == 32772  # ceil((1048576 + 1) / 32) -> multiple of 4
    assert all(r.outcome == "shut down" for r in result.ranks[1:])


def assert_accounted_for(result, ranks, timeout_s):
    """One result per rank, each with an outcome and, unless it finished, why; the deadline
    stated in the result and in its explanation."""
    assert [r.rank for r in result.ranks] == list(range(ranks)) and len(set(result.pids)) == ranks
    assert all(
        r.outcome in ("finished", "raised", "shut down", "died", "hung") for r in result.ranks
    )
    assert all(r.error for r in result.ranks if r.outcome != "finished")
    assert result.timeout_s == timeout_s and f"timeout_s={timeout_s:g}" in explain_run(result)


def assert_every_request_has_a_status_and_a_reason(result, config):
    """All the run's requests, each once, with a status and a reason (a rank's or "not routed")."""
    kept = sum(len(r.status) for r in result.ranks) + len(getattr(result, "unrouted", {}))
    assert kept == len(config.requests), f"{kept} of {len(config.requests)} requests kept a status"
    outcomes = result.request_outcomes()
    assert sorted(outcomes) == sorted(r.request_id for r in config.requests)
    assert all(status and reason for _, status, reason in outcomes.values()), outcomes
    assert all(set(r.reasons) == set(r.status) for r in result.ranks)
    return outcomes


def assert_no_transport_text(result):
    """What a rank or request reports names ranks and steps, not gloo's internals."""
    texts = [r.error or "" for r in result.ranks] + [
        sentence(why) for r in result.ranks for why in r.reasons.values()
    ]
    assert not [t for t in texts if "gloo" in t or "pair.cc" in t or "Connection closed" in t]


@pytest.fixture(scope="module")
def died4(scenario):
    config = scenario_config(scenario, 4, "none/clamped", fault=Fault(rank=2, step=3, kind="die"))
    start = time.monotonic()
    result = run_ranks(config, timeout_s=20, progress=False)
    assert time.monotonic() - start < 15
    assert_no_survivors(result)
    return config, result


@pytest.fixture(scope="module")
def hung4(scenario):
    config = scenario_config(scenario, 4, "none/clamped", fault=Fault(rank=1, step=2, kind="hang"))
    start = time.monotonic()
    result = run_ranks(config, timeout_s=4, progress=False)
    assert time.monotonic() - start < 4 + 5  # the timeout, plus terminate/join grace
    assert_no_survivors(result)
    return config, result


def test_a_rank_that_dies_ends_the_run_with_every_rank_accounted_for(died4):
    _, result = died4
    assert_accounted_for(result, 4, 20)
    assert result.ended == "died" and result.engine_down
    assert (
        result.ranks[2].outcome == "died"
        and f"exit code {FAULT_EXIT_CODE}" in result.ranks[2].error
    )
    assert all(r.outcome in ("shut down", "hung") for i, r in enumerate(result.ranks) if i != 2)


def test_after_a_death_every_request_has_a_status_and_a_reason_naming_the_rank(died4):
    """Rank 2 dies at step 3: its live requests are "lost" with a reason naming it and the
    step; the survivors' requests keep their status with the same cause; the request that had
    not arrived is "not routed"; the survivors' error names rank 2, not gloo's message."""
    config, result = died4
    outcomes = assert_every_request_has_a_status_and_a_reason(result, config)
    assert_no_transport_text(result)
    failure = result.failure
    assert (failure.rank, failure.kind, failure.step) == (2, "died", 3)
    assert 0 < failure.at_s <= result.wall_s + 0.1
    assert failure.describe().startswith("rank 2 died at step 3, ")
    lost = {k: v for k, v in outcomes.items() if v[0] == 2}
    assert lost and {v[1] for v in lost.values()} == {"lost"}
    assert all(
        v[2].cause is Cause.LOST_WITH_ITS_RANK and sentence(v[2]) == f"lost: {failure.describe()}"
        for v in lost.values()
    )
    for r in result.ranks[:2] + result.ranks[3:]:
        # a survivor that could not report within the grace period is killed: its error says so
        assert r.outcome == "shut down" and r.error.startswith(f"shut down: {failure.describe()}")
        assert r.status and all(
            r.reasons[k].cause is Cause.RANK_STOPPED
            and r.reasons[k].message.startswith(f"shut down: {failure.describe()}")
            for k, s in r.status.items()
            if s in ("waiting", "running")
        )
    assert {v[1] for k, v in outcomes.items() if v[0] is None} <= {"not routed"}
    assert all(why.cause is Cause.NOT_ROUTED for why in result.unrouted.values())
    assert_no_transport_text(result)
    assert f"died - {failure.describe()}" in explain_run(result)
    assert result.fault_fired is True and "fired" in explain_run(result)


def test_a_rank_that_hangs_ends_the_run_within_the_timeout(hung4):
    _, result = hung4
    assert_accounted_for(result, 4, 4)
    assert result.ended == "hung" and len(result.ranks) == 4
    assert result.ranks[1].outcome == "hung" and "timeout_s=4" in result.ranks[1].error


def test_a_hung_rank_is_named_and_the_ranks_waiting_for_it_shut_down(hung4):
    """Only rank 1 hung (the others waited for it in the all_gather): it is named, with the
    step, in the result and the report; every request keeps a status and a reason."""
    config, result = hung4
    assert [r.outcome for r in result.ranks] == ["shut down", "hung", "shut down", "shut down"]
    failure = result.failure
    assert (failure.rank, failure.kind, failure.step) == (1, "hung", 2) and len(
        result.failures
    ) == 1
    assert 0 < failure.at_s < 4
    assert result.reason == failure.describe() and "rank 1 hung at step 2" in explain_run(result)
    for r in result.ranks[:1] + result.ranks[2:]:
        assert r.error.startswith(f"shut down: {failure.describe()}; killed waiting for it")
    outcomes = assert_every_request_has_a_status_and_a_reason(result, config)
    assert {v[1] for v in outcomes.values() if v[0] == 1} == {"lost"}
    assert all(
        sentence(v[2]) == f"lost: {failure.describe()}" for v in outcomes.values() if v[0] == 1
    )
    assert all(r.blocks == 29962 for r in result.ranks)  # the pool each rank built, from the record


@pytest.mark.parametrize(
    "policy, ended", [("capacity", "completed"), ("none/clamped", "shut down")]
)
def test_a_fault_at_a_step_the_run_never_reaches_is_reported_as_not_fired(scenario, policy, ended):
    config = scenario_config(scenario, 2, policy, fault=Fault(rank=1, step=10**6, kind="die"))
    result = run_ranks(config, timeout_s=30, progress=False)
    assert_no_survivors(result)
    assert result.ended == ended and "did not fire" in result.reason, result.reason
    assert result.fault_fired is False
    assert result.reason.endswith(
        f"; {config.fault!r} did not fire: rank 1 never ran step 1000000 "
        f"(the run ended at step {max(r.end_step for r in result.ranks)})"
    )
    assert f"fault: {config.fault!r} did not fire" in explain_run(result)
    assert_every_request_has_a_status_and_a_reason(result, config)


def test_a_rank_killed_from_outside_while_another_hangs(scenario):
    """SIGKILL (the OOM killer's signal) to rank 2 while rank 1 hangs: the run ends
    DEATH_GRACE_S after the death is seen, long before its timeout, with every rank accounted
    for and no process left."""
    config = scenario_config(scenario, 4, "none/clamped", fault=Fault(rank=1, step=2, kind="hang"))
    killed = {}

    def kill_rank_2():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ranks = {p.name: p for p in multiprocessing.active_children()}
            if len(ranks) == 4 and "kvlab-rank-2" in ranks:
                time.sleep(1.0)  # well into the run: rank 1 hangs at step 2
                killed["pid"] = ranks["kvlab-rank-2"].pid
                killed["at"] = time.monotonic()
                os.kill(killed["pid"], signal.SIGKILL)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_rank_2)
    killer.start()
    result = run_ranks(config, timeout_s=60, progress=False)
    killer.join()
    assert "pid" in killed, "the rank processes never showed up"
    assert time.monotonic() - killed["at"] < supervisor.DEATH_GRACE_S + 5  # not the 60 s timeout
    assert_no_survivors(result)
    assert_accounted_for(result, 4, 60)
    assert result.ended == "died" and result.pids[2] == killed["pid"]
    assert (
        result.ranks[2].outcome == "died"
        and f"exit code {-signal.SIGKILL}: SIGKILL" in result.ranks[2].error
    )
    assert result.ranks[1].outcome == "hung"
    assert [(f.rank, f.kind) for f in result.failures] == [(2, "died"), (1, "hung")]
    assert result.failures[1].step == 2
    assert_every_request_has_a_status_and_a_reason(result, config)
    assert_no_transport_text(result)


def test_an_interrupt_leaves_no_rank_process(scenario, monkeypatch):
    class Interrupting:
        n = 0

        def update(self, _):
            raise KeyboardInterrupt

        def close(self):
            pass

    monkeypatch.setattr(supervisor, "rank_progress", lambda enabled, world: Interrupting())
    with pytest.raises(KeyboardInterrupt):
        run_ranks(scenario_config(scenario, 4, "none/clamped"), progress=True)
    assert multiprocessing.active_children() == []


def test_a_rank_that_raises_brings_its_traceback_home_and_leaves_no_error_file(
    scenario, monkeypatch, tmp_path
):
    def broken_loop(runner, comm, on_step):  # a kvlab bug inside one rank (forked: inherited)
        if runner.rank == 1:
            raise RuntimeError("boom in rank 1")
        return real_loop(runner, comm, on_step)

    real_loop = supervisor.rank_loop
    monkeypatch.setattr(supervisor, "rank_loop", broken_loop)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where torch's error files go
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    with pytest.raises(
        RuntimeError, match=r"(?s)rank 1 failed with a kvlab error:.*boom in rank 1"
    ):
        run_ranks(scenario_config(scenario, 2, "capacity"), progress=False, timeout_s=30)
    assert multiprocessing.active_children() == []
    assert list(tmp_path.iterdir()) == []  # the error file was read and removed


@pytest.mark.parametrize(
    "ranks, error, match",
    [
        (0, ValueError, r"ranks must be in \[1, 128\], got 0"),
        (129, ValueError, r"ranks must be in \[1, 128\], got 129"),
        (2.5, TypeError, r"ranks must be an int"),
    ],
)
def test_bad_rank_counts(scenario, ranks, error, match):
    with pytest.raises(error, match=match):
        scenario_config(scenario, ranks, "none/clamped")


def test_bad_backend_policy_and_arguments(scenario):
    config = scenario_config(scenario, 2, "none/clamped")
    with pytest.raises(ValueError, match=r"backend must be one of \['gloo', 'nccl'\], got 'mpi'"):
        run_ranks(config, backend="mpi")
    with pytest.raises(ValueError, match="policy must be one of"):
        scenario_config(scenario, 2, "wide")
    with pytest.raises(ValueError, match="timeout_s"):
        run_ranks(config, timeout_s=0)
    with pytest.raises(TypeError, match="config must be a RunConfig"):
        run_ranks({"ranks": 2})
    with pytest.raises(ValueError, match="fault needs the process mode"):
        run_ranks(
            scenario_config(scenario, 2, "none/clamped", fault=Fault(1, 0, "die")), in_process=True
        )
    with pytest.raises(ValueError, match=r"fault.rank must be in \[0, 1\]"):
        scenario_config(scenario, 2, "none/clamped", fault=Fault(3, 0, "die"))
    with pytest.raises(ValueError, match="has no deployment block"):
        scenario_config(load_scenario("rtx5080-4mib"))


@pytest.mark.parametrize(
    "call, error, text",
    [
        (
            lambda sc: rank_budget((i for i in range(3)), 0, 2),
            TypeError,
            "scenario must be a Scenario",
        ),
        (
            lambda sc: rank_budget(load_scenario("rtx5080-4mib"), 0, 2),
            ValueError,
            "has no deployment block",
        ),
        (lambda sc: rank_budget(sc, math.inf, 2), TypeError, "rank must be an int in [0, 1]"),
        (lambda sc: rank_budget(sc, math.nan, 2), TypeError, "rank must be an int"),
        (lambda sc: rank_budget(sc, -1, 2), ValueError, "rank must be in [0, 1], got -1"),
        (lambda sc: rank_budget(sc, True, 2), TypeError, "rank must be an int"),
        (lambda sc: rank_budget(sc, 0, 2**63), ValueError, "ranks must be in [1, 128]"),
        (
            lambda sc: rank_budget(sc, 0, 2, workspace_gib=(i for i in range(3))),
            TypeError,
            "workspace_gib must be a number",
        ),
        (
            lambda sc: rank_budget(sc, 0, 2, workspace_gib=2**63),
            ValueError,
            "workspace_gib must be in [0.0, ",
        ),
        (lambda sc: scenario_config(sc, 2, fault="x"), TypeError, "fault must be a Fault"),
        (
            lambda sc: dataclasses.replace(scenario_config(sc, 2), pins=0),
            TypeError,
            "pins must be a Mapping",
        ),
        (
            lambda sc: dataclasses.replace(scenario_config(sc, 2), fault="x"),
            TypeError,
            "fault must be a Fault",
        ),
        (
            lambda sc: dataclasses.replace(scenario_config(sc, 2), requests=0),
            TypeError,
            "requests must be a sequence of Request objects",
        ),
        (
            lambda sc: dataclasses.replace(scenario_config(sc, 2), requests=np.zeros((2, 2))),
            TypeError,
            "requests[0] must be a Request",
        ),
        (
            lambda sc: dataclasses.replace(scenario_config(sc, 2), budgets=-1),
            TypeError,
            "budgets must be a sequence",
        ),
        (
            lambda sc: dataclasses.replace(scenario_config(sc, 2), budgets=()),
            ValueError,
            "len(budgets) must be in [1, 128]",
        ),
        (
            lambda sc: dataclasses.replace(scenario_config(sc, 2), budgets=("x",)),
            TypeError,
            "budgets[0] must be a MemoryBudget",
        ),
    ],
)
def test_bad_config_arguments_name_the_parameter(scenario, call, error, text):
    with pytest.raises(error) as info:
        call(scenario)
    assert text in str(info.value)


def test_a_config_takes_its_requests_and_budgets_from_any_iterable(scenario):
    config = scenario_config(scenario, 2)
    again = dataclasses.replace(
        config, requests=iter(config.requests), budgets=list(config.budgets)
    )
    assert (
        again == config and again.requests == config.requests and isinstance(again.budgets, tuple)
    )


@pytest.mark.parametrize("progress", ["", 2**63, None, math.nan, np.zeros((2, 2))])
def test_the_progress_flag_must_be_a_bool(scenario, progress):
    with pytest.raises(TypeError, match="progress must be a bool"):
        run_ranks(scenario_config(scenario, 2), in_process=True, progress=progress)


@pytest.mark.skipif(
    torch.cuda.is_available() and torch.cuda.device_count() >= 16,
    reason="this machine has a GPU per rank",
)
def test_nccl_without_a_gpu_per_rank_names_backend_and_gpu_count(scenario):
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(
        ValueError,
        match=rf"backend='nccl' needs one CUDA GPU per rank: ranks=16, "
        rf"torch sees {gpus} GPU\(s\)",
    ):
        run_ranks(scenario_config(scenario, 16, "none/clamped"), backend="nccl")


def test_allreduce_min_must_never_raise_the_local_capacity(scenario):
    runner = RankRunner(0, scenario_config(scenario, 2, "none/clamped"))
    with pytest.raises(AssertionError, match="allreduce\\(MIN\\) raised the local capacity"):
        runner.build(runner.local_capacity_tokens + 32)


def test_routing_pins_then_balances_by_tokens():
    new = [
        Request("pinned", 100, 1),
        Request("a", 500, 1),
        Request("b", 400, 1),
        Request("c", 300, 1),
        Request("d", 200, 1),
    ]
    # rank 0 is busy (2 requests, many tokens); the longest free request goes to the lightest
    assignment = route(
        new, active_requests=[2, 0, 0], active_tokens=[9000, 0, 0], pins={"pinned": 0}
    )
    assert assignment["pinned"] == 0
    # expected load = max(ceil((3 + 4) / 3), 3) = 3: rank 0 is full, ranks 1 and 2 take turns
    assert assignment == {"pinned": 0, "a": 1, "b": 2, "c": 2, "d": 1}
    assert route([], [0, 0], [0, 0], {}) == {}


def _with_parameters(scenario, **changes):
    return dataclasses.replace(
        scenario, parameters=dataclasses.replace(scenario.parameters, **changes)
    )


@pytest.mark.parametrize(
    "make, match",
    [
        (
            lambda sc: scenario_config(sc, 2, "none/clamped", workspace_gib=4000.0),
            r"rank 0's KV quota of 0 bytes holds no page of \d+ bytes",
        ),
        (
            lambda sc: scenario_config(
                _with_parameters(sc, num_layers=1, num_kv_heads=1, head_dim=1, kv_dtype="fp8"), 2
            ),
            r"each rank's pool would hold \d+ tokens.*MAX_RANK_STORAGE_BYTES=1073741824",
        ),
        (
            lambda sc: scenario_config(
                _with_parameters(sc, tokens_per_block=1, max_batch_size=65536), 2
            ),
            r"MAX_TABLE_BYTES=1073741824 .*max_batch_size=65536",
        ),
    ],
)
def test_a_run_no_rank_could_build_is_refused_before_any_rank_starts(scenario, make, match):
    before = multiprocessing.active_children()
    with pytest.raises(ValueError, match=match):
        make(scenario)
    assert multiprocessing.active_children() == before


@pytest.mark.parametrize("policy", ["none/clamped", "capacity"])
def test_in_process_every_request_has_a_status_and_a_reason(scenario, policy):
    config = scenario_config(scenario, 4, policy)
    result = run_ranks(config, in_process=True, progress=False)
    assert_every_request_has_a_status_and_a_reason(result, config)
    assert result.failures == () and result.fault_fired is None and result.unrouted == {}
    assert "requests: 49 (" in explain_run(result)


def test_the_in_process_result_states_its_timeout_too(scenario):
    result = run_ranks(
        scenario_config(scenario, 2, "capacity"), in_process=True, timeout_s=30, progress=False
    )
    assert result.timeout_s == 30 and explain_run(result).splitlines()[-1].endswith("timeout_s=30")


def test_in_threads_stops_every_rank_and_raises_the_failing_ranks_own_error():
    """Rank 1 fails before the collective; rank 0, waiting in it, is released (CollectiveFailed)
    instead of waiting out the timeout, and the caller sees rank 1's error."""
    from kvlab.run.comm import CollectiveFailed, ThreadComm, in_threads

    comm = ThreadComm(2, timeout_s=60)
    seen = {}

    def target(rank):
        if rank == 1:
            raise KeyError("rank 1 broke")
        try:
            comm.for_rank(0).all_reduce_min(5)
        except CollectiveFailed as exc:
            seen[0] = exc
            raise

    start = time.monotonic()
    with pytest.raises(KeyError, match="rank 1 broke"):
        in_threads(comm, target)
    assert isinstance(seen[0], CollectiveFailed) and time.monotonic() - start < 30


@pytest.fixture
def slow_steps(monkeypatch):
    """Every rank takes 50 ms a step (the forked ranks inherit the patch): slow but healthy."""
    iterate = RankRunner.iterate

    def slow(self, statuses):
        time.sleep(0.05)
        return iterate(self, statuses)

    monkeypatch.setattr(RankRunner, "iterate", slow)


def test_slow_ranks_that_keep_stepping_are_not_hung(scenario, slow_steps):
    """The watchdog: timeout_s is the time without progress, not a deadline for the run."""
    result = run_ranks(scenario_config(scenario, 2, "none/clamped"), timeout_s=1.0, progress=False)
    assert result.wall_s > 2.0  # twice the timeout, and no rank was called hung
    assert result.ended == "shut down" and not result.failures
    assert result.ranks[0].outcome == "raised"


def test_a_run_past_its_deadline_says_so(scenario, slow_steps):
    result = run_ranks(
        scenario_config(scenario, 2, "none/clamped"), timeout_s=10.0, deadline_s=1.0, progress=False
    )
    assert result.ended == "deadline" and not result.failures
    assert result.reason.startswith("the run passed its deadline_s=1")
    assert "still making progress" in result.reason
    assert [r.outcome for r in result.ranks] == ["stopped", "stopped"]
    outcomes = result.request_outcomes()
    assert len(outcomes) == len(scenario_config(scenario, 2, "none/clamped").requests)
    lost = [why for _, status, why in outcomes.values() if status == "lost"]
    assert lost and all("deadline_s=1" in sentence(why) for why in lost)
    assert all(why for _, _, why in outcomes.values())  # every request says why
    assert "deadline_s=1" in explain_run(result)
    assert multiprocessing.active_children() == []


def test_deadline_needs_the_process_mode(scenario):
    with pytest.raises(ValueError, match="deadline_s needs the process mode"):
        run_ranks(scenario_config(scenario, 2, "none/clamped"), in_process=True, deadline_s=5)
    with pytest.raises(ValueError, match="deadline_s"):
        run_ranks(scenario_config(scenario, 2, "none/clamped"), deadline_s=-1)
