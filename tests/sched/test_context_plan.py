"""kvlab.sched.context_plan: the context planner (``plan_context``) changes nothing and sizes a
chunk as TensorRT-LLM's ``_try_schedule_context_full`` / ``_chunked`` do (the fast-forwarded
run's certain refusal, built on it, is held to the full attempt in tests/run/test_fast_forward.py)."""

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab import Request
from kvlab.sched.context_plan import plan_context


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
