"""kvlab.sched.context_plan: the context planner (``plan_context``) changes nothing and sizes a
chunk as TensorRT-LLM's ``_try_schedule_context_full`` / ``_chunked`` do, and the certain refusal
built on it (``CertainRefusal``) refuses only what the full attempt refuses, leaving no trace."""

import dataclasses
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlab import KVCacheManager, KVGeometry, Request, Scheduler
from kvlab.core.kv_cache import PageIndexTooShort
from kvlab.sched.base import ScheduledBatch
from kvlab.sched.context_plan import PassBudget, ScheduleAction, plan_context
from kvlab.sched.shortcuts import refusal_window


def _fields(request):
    return [getattr(request, f.name) for f in dataclasses.fields(request)]


@st.composite
def _requests(draw):
    prompt = draw(st.integers(1, 3000))
    request = Request("r", prompt, 8, num_draft_tokens=draw(st.integers(0, 4)))
    request.recomputed_tokens = draw(st.integers(0, 50))
    request.context_current_position = draw(st.integers(0, request.context_len - 1))
    return request


@settings(max_examples=400, deadline=None)
@given(
    request=_requests(),
    chunk_unit=st.integers(1, 64),
    chunked=st.booleans(),
    budget_left=st.none() | st.integers(0, 4000),
    max_context_length=st.none() | st.integers(1, 4000),
    extra_sized=st.none() | st.integers(0, 500),
)
def test_the_plan_changes_nothing_and_sizes_the_chunk(
    request, chunk_unit, chunked, budget_left, max_context_length, extra_sized
):
    remaining, drafts = request.context_remaining_length, request.num_draft_tokens
    sized = remaining if extra_sized is None else remaining + extra_sized
    if chunked:  # phase 2 plans a chunk only with a chunk's worth of budget and context length
        budget_left = None if budget_left is None else max(budget_left, chunk_unit)
        max_context_length = (
            None if max_context_length is None else max(max_context_length, chunk_unit)
        )
    before = _fields(request)
    plan = plan_context(
        request,
        budget_left,
        chunked,
        max_context_length,
        chunk_unit,
        None if extra_sized is None else sized,
    )
    assert _fields(request) == before
    if not chunked:  # one unit: all of it, or STOP on the budget
        if budget_left is not None and sized + drafts > budget_left:
            assert plan is None
        else:
            assert plan == (remaining, sized + drafts, remaining + drafts)
        return
    chunk, budget_tokens, resize_tokens = plan
    limits = [n for n in (sized, budget_left, max_context_length) if n is not None]
    assert 0 < chunk <= remaining
    if chunk < remaining:  # a non-last chunk: whole units, as large as the limits allow
        assert chunk % chunk_unit == 0 and budget_tokens == resize_tokens == chunk
        assert min(limits) - chunk_unit < chunk <= min(limits)
    else:  # the last chunk carries the drafts, charged past the budget check
        assert resize_tokens == remaining + drafts
        assert remaining <= budget_tokens - drafts <= min(limits)
        if extra_sized is None:
            assert budget_tokens == remaining + drafts


def _pool(tokens_per_block, num_blocks, host_tier, hogs, suspended, **scheduler_args):
    """A scheduler whose pool holds those of ``hogs`` (prompt lengths, each scheduled whole) that
    fit, the first ``suspended`` of them suspended."""
    geometry = KVGeometry(1, 1, 4, tokens_per_block=tokens_per_block)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        manager = KVCacheManager(
            geometry,
            quota_bytes=num_blocks * geometry.bytes_per_block,
            max_seq_len=tokens_per_block * 64,
            max_batch_size=6,
            host_cache_size=host_tier,
        )
    scheduler = Scheduler(manager, admission="none", max_batch_size=6, **scheduler_args)
    held = []
    for i, prompt in enumerate(hogs):
        hog = Request(f"hog{i}", prompt, 4)
        scheduler.submit(hog)
        try:
            action, _ = scheduler._schedule_context(hog, PassBudget(None, 6), ScheduledBatch(), [])
        except PageIndexTooShort:  # longer than a row: it holds nothing
            continue
        if action is ScheduleAction.SCHEDULED:
            held.append(hog)
    for hog in held[:suspended]:
        scheduler._suspend(hog)
    return scheduler


def _refused_as_the_full_attempt(
    tokens_per_block,
    num_blocks,
    host_tier,
    hogs,
    suspended,
    draw_prompt,
    drafts,
    chunked,
    max_num_tokens,
    used,
    max_context_length,
) -> bool:
    """Whether the certain refusal refuses the first chunk of a new request of
    ``draw_prompt(fit, width)`` tokens (its window); when it does, the full attempt must SKIP it
    and leave the pool as it was."""
    scheduler = _pool(
        tokens_per_block,
        num_blocks,
        host_tier,
        hogs,
        suspended,
        max_num_tokens=max_num_tokens,
        chunked_prefill=chunked,
        max_context_length=max_context_length,
        enable_recompute_pause=False,
    )
    budget = PassBudget(max_num_tokens, 6)
    if max_num_tokens is not None:  # part of the budget spent, a chunk's worth left when chunked
        budget.num_tokens = min(used, max_num_tokens - (tokens_per_block if chunked else 0))
    refusal = scheduler._pending_refusal(budget)
    request = Request(
        "new", draw_prompt(*refusal_window(scheduler.manager)), 4, num_draft_tokens=drafts
    )
    scheduler.submit(request)
    if refusal is None or not refusal.refuses_first_chunk(request):
        return False
    manager = scheduler.manager
    pool_before = (manager.free_blocks, sorted(manager.caches), manager.free_slots)
    try:  # the full attempt
        action, _ = scheduler._schedule_context(request, budget, ScheduledBatch(), [])
    except PageIndexTooShort:
        raise AssertionError("refused a chunk whose attempt raises") from None
    assert action is ScheduleAction.SKIP
    assert (manager.free_blocks, sorted(manager.caches), manager.free_slots) == pool_before
    assert request.state == "waiting"
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tokens_per_block=st.sampled_from([4, 16]),
    num_blocks=st.integers(4, 40),
    host_tier=st.sampled_from([None, 0, 1 << 12]),
    hogs=st.lists(st.integers(1, 200), max_size=3),
    suspended=st.integers(0, 3),
    drafts=st.integers(0, 3),
    chunked=st.booleans(),
    max_num_tokens=st.none() | st.integers(16, 600),
    used=st.integers(0, 600),
    max_context_length=st.none() | st.integers(16, 600),
    data=st.data(),
)
def test_a_certain_refusal_is_the_full_attempts_refusal(
    tokens_per_block,
    num_blocks,
    host_tier,
    hogs,
    suspended,
    drafts,
    chunked,
    max_num_tokens,
    used,
    max_context_length,
    data,
):
    def draw_prompt(fit, width):  # mostly at the window's edges, where a token decides
        edges = [max(1, edge + delta) for edge in (fit, width) for delta in (-4, 0, 4)]
        return data.draw(st.integers(min(edges), max(edges)) | st.integers(1, 600), label="prompt")

    _refused_as_the_full_attempt(
        tokens_per_block,
        num_blocks,
        host_tier,
        hogs,
        suspended,
        draw_prompt,
        drafts,
        chunked,
        max_num_tokens,
        used,
        max_context_length,
    )


@pytest.mark.parametrize("chunked", [True, False])
def test_the_certain_refusal_fires(chunked):
    """Not vacuous: 12 of 16 pages held (one hog suspended to the host tier), a 200-token first
    chunk (13 pages) cannot fit."""
    assert _refused_as_the_full_attempt(
        16, 16, 1 << 12, [96, 96], 1, lambda fit, width: 200, 0, chunked, None, 0, None
    )
