"""Attention-DP routing (``balance_requests_across_ranks``, tensorrt_llm/_torch/pyexecutor/
request_utils.py): a pinned request goes to its rank; the others, longest prompt first, to the
rank with the fewest active prompt tokens below the expected load. kvlab simplifies: a pin is
always honoured (the real one waits while the pinned rank is full)."""

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
    """Request id -> rank for the requests arriving now, from each rank's all-gathered live
    requests and their prompt tokens (``pins`` name ranks that exist: RunConfig checks)."""
    ranks = len(active_requests)
    counts, tokens = list(active_requests), list(active_tokens)
    assignment: dict[str, int] = {}
    free = []
    for request in new:
        rank = pins.get(request.request_id)
        if rank is None:
            free.append(request)
            continue
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
