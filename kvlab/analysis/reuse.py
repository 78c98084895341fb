"""What prefix reuse could save on a trace: the unbounded-cache ceiling.

A trace that records each prompt's block hashes (Mooncake's FAST'25 traces, one hash per 512
tokens, ``Request.prefix_hashes``) says how much of its KV cache a prefix cache could serve: a
block whose hash appeared in an earlier request is cached, with its whole prefix, in a cache
that never evicts. That share of all blocks is the ceiling any real reuse (TensorRT-LLM's
``enable_block_reuse``, on by default; vLLM's and SGLang's prefix caches) stays under: a real
pool evicts. The hashes are chained (a block's hash stands for its prefix), so "seen before"
and "its whole prefix seen before" are the same count; :func:`reuse_ceiling` checks that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from kvlab.core.request import Request


@dataclass(frozen=True)
class ReuseCeiling:
    """Blocks in the trace's prompts, and how many of them a never-evicting cache would hold
    already when they arrive."""

    blocks: int
    cached: int

    @property
    def hit_ratio(self) -> float:
        return self.cached / self.blocks if self.blocks else 0.0


def reuse_ceiling(requests: Iterable[Request]) -> ReuseCeiling:
    """The ceiling over ``requests`` in arrival order (module docstring). ValueError when a
    request's hashes are not prefix-chained (a block seen before after one that was not)."""
    seen, blocks, cached = set(), 0, 0
    for request in requests:
        hashes = request.prefix_hashes
        hits = next((i for i, h in enumerate(hashes) if h not in seen), len(hashes))
        if any(h in seen for h in hashes[hits:]):
            raise ValueError(f"prefix_hashes of request {request.request_id!r} are not prefix-"
                             "chained: a cached block follows an uncached one")
        blocks += len(hashes)
        cached += hits
        seen.update(hashes)
    return ReuseCeiling(blocks, cached)


__all__ = ["ReuseCeiling", "reuse_ceiling"]
