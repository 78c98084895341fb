"""Attention-DP routing of arriving requests to ranks (``schedule_attention_dp_requests`` and
``balance_requests_across_ranks``, tensorrt_llm/_torch/pyexecutor/request_utils.py).

A request pinned to a rank (``SchedulingParams.attention_dp_rank``, not relaxed) goes to that
rank. The others, longest prompt first, go one by one to the rank with the fewest active prompt
tokens (ties: fewest active requests, then lowest rank) among the ranks below the expected load
``max(ceil((active + new) / ranks), max(active per rank))``. kvlab always honours a pin (the
real one waits while the pinned rank has ``max_num_active_requests``).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

from kvlab.core.arith import div_ceil
from kvlab.core.request import Request


def route(
    new: Sequence[Request],
    active_requests: Sequence[int],
    active_tokens: Sequence[int],
    pins: Mapping[str, int],
) -> dict[str, int]:
    """Attention-DP routing of the requests arriving now (module docstring): request id ->
    rank. ``active_requests``/``active_tokens``: each rank's live requests and their prompt
    tokens, as all-gathered."""
    ranks = len(active_requests)
    if ranks == 0 or len(active_tokens) != ranks:
        raise ValueError(
            f"active_requests and active_tokens must give one number per rank (at "
            f"least one), got {ranks} and {len(active_tokens)}"
        )
    counts, tokens = list(active_requests), list(active_tokens)
    assignment: dict[str, int] = {}
    free = []
    for request in new:
        rank = pins.get(request.request_id)
        if rank is None:
            free.append(request)
            continue
        if not 0 <= rank < ranks:
            raise ValueError(
                f"pins[{request.request_id!r}] must be a rank in [0, {ranks - 1}], got {rank}"
            )
        assignment[request.request_id] = rank
        counts[rank] += 1
        tokens[rank] += request.prompt_len
    if not free:
        return assignment
    expected = max(div_ceil(sum(counts) + len(free), ranks), max(counts))
    heap = [(tokens[r], counts[r], r) for r in range(ranks) if counts[r] < expected]
    heapq.heapify(heap)
    for request in sorted(free, key=lambda r: r.prompt_len, reverse=True):  # stable on ties
        rank_tokens, rank_count, rank = heapq.heappop(heap)
        assignment[request.request_id] = rank
        if rank_count + 1 < expected:
            heapq.heappush(heap, (rank_tokens + request.prompt_len, rank_count + 1, rank))
    return assignment
