"""PrefixCache: committed pages, keyed by the prefix they hold, shared by caches and kept after.

Models the V2 manager's block reuse (``KvCacheConfig.enable_block_reuse``, on by default;
the radix tree of tensorrt_llm/runtime/kv_cache_manager_v2/_block_radix_tree.py, the
eviction queue of _eviction_controller/; docs/REFERENCE.md §10):

- a page is *committed* once the tokens it holds are computed: it joins the tree under the
  key of the prefix it ends, and a cache that holds it *holds* it (a count of holders);
- :meth:`match` finds the longest committed prefix of a prompt, page by page; with partial
  reuse, the page after it that shares the most leading tokens is copied into a private page;
- a committed page no cache holds is *evictable*: it still counts as available, and an
  allocation that finds too few free pages evicts the least recently released first (a
  cache's last page first), before suspended caches move to the tier below.

A prompt's identity is its chained block hashes (``Request.prefix_hashes``, one per
``Request.tokens_per_hash`` tokens, each standing for its whole prefix: Mooncake's traces
record them per 512 tokens, :func:`chain_hashes` makes them from token ids). The first ``end``
tokens of a prompt are known by ``(hash of the block holding token end, end)``: two prompts
share them when those agree. Coarser hashes than pages see less than upstream, which compares
tokens: a page inside a hash block shared only in part is not matched (a prompt without
hashes matches nothing and commits nothing, as random prompts would).

Simplified, and said: evicting a page drops it (upstream moves it to the host tier first and
keeps it in the tree); cached pages are evicted before suspended caches move down (upstream
orders both by last use); a suspended cache that moves down gives up its holds and comes back
into private pages.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from kvlab.core.checks import check_int

if TYPE_CHECKING:  # pragma: no cover
    from kvlab.core.host_tier import HostTier
    from kvlab.core.kv_cache import KVCache
    from kvlab.core.pool import PagePool
    from kvlab.core.request import Request

#: Tokens per hash in Mooncake's FAST'25 traces (``hash_ids``: one per 512-token block).
MOONCAKE_TOKENS_PER_HASH = 512


def chain_hashes(tokens: Sequence[int], tokens_per_hash: int = 1) -> Tuple[int, ...]:
    """One hash per ``tokens_per_hash`` tokens (the last block may be shorter), each chained
    on the one before, so that it stands for the whole prefix it ends."""
    tokens_per_hash = check_int("tokens_per_hash", tokens_per_hash, low=1, high=1 << 20)
    hashes, previous = [], 0
    for start in range(0, len(tokens), tokens_per_hash):
        previous = hash((previous, tuple(tokens[start:start + tokens_per_hash])))
        hashes.append(previous)
    return tuple(hashes)


def prefix_key(hashes: Tuple[int, ...], tokens_per_hash: int, end: int) -> tuple:
    """The identity of a prompt's first ``end`` tokens (module docstring); ``end`` is within
    the tokens the hashes cover."""
    return hashes[(end - 1) // tokens_per_hash], end


def hashed_tokens(request: "Request") -> int:
    """The leading prompt tokens the request's hashes identify."""
    return min(request.prompt_len, len(request.prefix_hashes) * request.tokens_per_hash)


class _Node:
    """A committed page: the prefix it ends (``key``: a hash and the prefix's length in
    tokens), the hashes that made it, and how many caches hold it."""

    __slots__ = ("page", "key", "hashes", "tokens_per_hash", "holders")

    def __init__(self, page, key, hashes, tokens_per_hash):
        self.page = page
        self.key = key
        self.hashes = hashes
        self.tokens_per_hash = tokens_per_hash
        self.holders = 1

    def first_block(self, tokens_per_block: int) -> tuple:
        """The partial-match index's key: the hash of the block holding the page's first token,
        and where the page starts."""
        start = (self.key[1] - 1) // tokens_per_block * tokens_per_block
        return self.hashes[start // self.tokens_per_hash], start


class Match:
    """What :meth:`PrefixCache.match` found: committed pages to hold, and a page to copy
    ``partial_tokens`` leading tokens from (None: no partial match)."""

    __slots__ = ("nodes", "partial", "partial_tokens", "tokens")

    def __init__(self, nodes: List[_Node], partial: Optional[_Node], partial_tokens: int,
                 tokens_per_block: int):
        self.nodes = nodes
        self.partial = partial
        self.partial_tokens = partial_tokens
        self.tokens = len(nodes) * tokens_per_block + partial_tokens


class PrefixCache:
    """The committed pages of one pool (module docstring) and the door every allocation of
    that pool goes through (:meth:`allocate`)."""

    def __init__(self, pool: "PagePool", host_tier: "HostTier", tokens_per_block: int,
                 enable_partial_reuse: bool = True):
        self.pool = pool
        self.host_tier = host_tier
        self.tokens_per_block = tokens_per_block
        self.enable_partial_reuse = enable_partial_reuse
        self._nodes: Dict[tuple, _Node] = {}
        self._by_page: Dict[int, _Node] = {}
        #: pages no cache holds, least recently released first
        self._evictable: "OrderedDict[int, _Node]" = OrderedDict()
        #: partial-match candidates: (hash of the block holding a page's first token, its start)
        self._by_first_block: Dict[tuple, List[_Node]] = {}
        self.evicted_blocks = 0

    # -- counts ------------------------------------------------------------------------
    @property
    def committed_blocks(self) -> int:
        return len(self._by_page)

    @property
    def evictable_blocks(self) -> int:
        return len(self._evictable)

    def is_committed(self, page: int) -> bool:
        return page in self._by_page

    # -- allocation: the pool's one door -----------------------------------------------
    def allocate(self, count: int) -> Optional[List[int]]:
        """``count`` free pages, evicting cached pages (least recently released first) and then
        moving suspended caches down where the pool has too few; None, with nothing evicted
        or moved, when even that cannot make enough."""
        pool = self.pool
        shortfall = count - pool.free_blocks
        if shortfall > 0:
            evictable = len(self._evictable)
            if shortfall > evictable and not self.host_tier.make_room(pool, count - evictable):
                return pool.allocate(count)  # None, counted as a failed allocation
            # a cache that moved down may have freed less than counted (pages it shared)
            self._evict(min(count - pool.free_blocks, len(self._evictable)))
        return pool.allocate(count)

    def _evict(self, count: int) -> None:
        if count <= 0:
            return
        popitem, nodes, by_page, by_first_block = (self._evictable.popitem, self._nodes,
                                                   self._by_page, self._by_first_block)
        tokens_per_block, freed = self.tokens_per_block, []
        for _ in range(count):
            page, node = popitem(last=False)
            del nodes[node.key], by_page[page]
            first_block = node.first_block(tokens_per_block)
            candidates = by_first_block[first_block]
            if len(candidates) == 1:
                del by_first_block[first_block]
            else:
                candidates.remove(node)
            freed.append(page)
        self.evicted_blocks += count
        self.pool.free(freed)

    # -- lookup ------------------------------------------------------------------------
    def match(self, request: "Request", limit: int) -> Match:
        """The committed pages holding the request's first tokens, at most ``limit`` of them,
        and (with partial reuse) the page after them sharing the most leading tokens."""
        tokens_per_block = self.tokens_per_block
        hashes, per_hash = request.prefix_hashes, request.tokens_per_hash
        usable = min(limit, hashed_tokens(request))
        nodes, get = [], self._nodes.get
        end = tokens_per_block
        while end <= usable:
            node = get((hashes[(end - 1) // per_hash], end))
            if node is None:
                break
            nodes.append(node)
            end += tokens_per_block
        start = end - tokens_per_block
        partial, partial_tokens = None, 0
        if self.enable_partial_reuse and start < usable:
            for candidate in self._by_first_block.get((hashes[start // per_hash], start), ()):
                shared = _shared_tokens(candidate, hashes, per_hash, start, usable) - start
                if shared > partial_tokens:
                    partial, partial_tokens = candidate, shared
        return Match(nodes, partial, partial_tokens, tokens_per_block)

    def hold(self, nodes: Sequence[_Node]) -> List[int]:
        """A new cache holds ``nodes`` (evictable ones stop being): their pages."""
        evictable = self._evictable
        for node in nodes:
            if node.holders == 0:
                del evictable[node.page]
            node.holders += 1
        return [node.page for node in nodes]

    def release(self, pages: Sequence[int]) -> None:
        """A cache lets go of committed ``pages``; those no cache holds become evictable, the
        last page first."""
        by_page, evictable = self._by_page, self._evictable
        for page in reversed(pages):
            node = by_page[page]
            node.holders -= 1
            if node.holders == 0:
                evictable[page] = node

    # -- commit ------------------------------------------------------------------------
    def commit(self, cache: "KVCache", request: "Request", end: int, last: bool) -> None:
        """Commit the cache's pages holding the request's first ``end`` prompt tokens (full
        pages; with ``last``, the partial page that ends the prompt too). A page whose key is
        committed already is given up for the tree's ("rebasing"), its row entry rewritten."""
        tokens_per_block, pages = self.tokens_per_block, cache.pages
        hashes, per_hash = request.prefix_hashes, request.tokens_per_hash
        end = min(end, hashed_tokens(request), len(pages) * tokens_per_block)
        index = cache.committed
        page_end = (index + 1) * tokens_per_block
        get = self._nodes.get
        while page_end <= end:  # the hot loop of a replay: one page a turn
            key = (hashes[(page_end - 1) // per_hash], page_end)
            node = get(key)
            if node is None:
                self._add(pages[index], key, hashes, per_hash)
            elif node.page != pages[index]:  # computed twice: rebase onto the tree's page
                self.hold([node])
                self.pool.free([pages[index]])
                pages[index] = node.page
                cache.page_index.write(cache.slot, index, [node.page])
            index += 1
            page_end += tokens_per_block
        cache.committed = index
        if last and end == request.prompt_len and index * tokens_per_block < end:
            key = prefix_key(hashes, per_hash, end)
            if key not in self._nodes:  # else the same partial page is cached: this one stays its own
                self._add(pages[index], key, hashes, per_hash)
                cache.committed = index + 1

    def _add(self, page, key, hashes, per_hash) -> None:
        node = _Node(page, key, hashes, per_hash)
        self._nodes[key] = node
        self._by_page[page] = node
        first_block = node.first_block(self.tokens_per_block)
        candidates = self._by_first_block.get(first_block)
        if candidates is None:
            self._by_first_block[first_block] = [node]
        else:
            candidates.append(node)

    # -- checks ------------------------------------------------------------------------
    def check_invariants(self, holders: Dict[int, int]) -> None:
        """``holders``: committed page -> caches holding it, counted by the manager."""
        for page, node in self._by_page.items():
            assert self.pool.is_allocated(page), f"committed page {page} is free in the pool"
            assert node.holders == holders.get(page, 0), (
                f"committed page {page}: {node.holders} holders counted, {holders.get(page, 0)} found")
            assert (node.holders == 0) == (page in self._evictable), (
                f"committed page {page}: holders {node.holders}, evictable {page in self._evictable}")
        assert set(holders) <= set(self._by_page), "a cache holds a page the tree does not have"

    def __repr__(self) -> str:
        return (f"PrefixCache({self.committed_blocks} committed pages, {self.evictable_blocks} "
                f"evictable, {self.evicted_blocks} evicted)")


def _shared_tokens(node: _Node, hashes, per_hash: int, start: int, usable: int) -> int:
    """How far the prompt of ``hashes`` agrees with the prefix ``node`` ends, from ``start``
    (both agree before it), within ``usable`` tokens: whole hash blocks only."""
    if node.tokens_per_hash != per_hash:
        return start
    other, end = node.hashes, min(node.key[1], usable)
    for block in range(start // per_hash, (end - 1) // per_hash + 1):
        if block >= len(other) or other[block] != hashes[block]:
            return max(start, block * per_hash)
    return end


__all__ = ["MOONCAKE_TOKENS_PER_HASH", "Match", "PrefixCache", "chain_hashes", "hashed_tokens",
           "prefix_key"]
