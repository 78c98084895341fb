"""PrefixCache: committed pages, keyed by the prefix they hold, shared by caches and kept after.

Models the V2 manager's block reuse (the radix tree of
tensorrt_llm/runtime/kv_cache_manager_v2/_block_radix_tree.py, read at commit
065ff9e93780bc0bdbfdbc7156a306ca14f5850c; its eviction queue; REFERENCE.md §10): a computed page
is *committed* under the key of the prefix it ends; caches *hold* it; :meth:`match` finds a
prompt's longest committed prefix (with partial reuse, the best next page to copy, unless 32 or
more pages hang under the node it would copy from); a page no cache holds is *evictable*, least
recently released first, in one order with suspended caches' pages (kvlab.core.host_tier); an
evicted page moves down to the host tier keeping its key, and a later match brings it back up
(page numbers from ``first_host_page`` on are pages there). A partial page whose tokens a
sibling holds is not committed, and a page extending a shorter partial sibling replaces it
(``Block.__init__``). Keys are scoped by the request's ``cache_salt``.
Simplified: hashes coarser than pages match less than upstream's tokens; host and disk are one
tier; no LoRA scope, no sliding windows, no per_conversation policy."""

from __future__ import annotations

import itertools
from collections import Counter, OrderedDict
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

import torch

from kvlab.core.checks import check_param
from kvlab.core.pool import put_pages, take_pages
from kvlab.core.reuse_scope import scope_seed

if TYPE_CHECKING:  # pragma: no cover
    from kvlab.core.host_tier import HostTier
    from kvlab.core.pool import PagePool
    from kvlab.core.request import Request

#: A committed page's key: (the hash of the block holding token ``end``, ``end``).
BlockKey = tuple[int, int]
#: What made a committed page: the prompt's hashes and their ``tokens_per_hash``.
Source = tuple[tuple[int, ...], int]
#: Partial matching is skipped under a node of this many children or more: upstream finds it
#: too slow to try them all (``find_best_partial_match_in_next_nodes``, TRTLLM-7784).
PARTIAL_MATCH_MAX_CHILDREN = 32


def chain_hashes(
    tokens: Sequence[int], tokens_per_hash: int = 1, previous: int = 0
) -> tuple[int, ...]:
    """One hash per ``tokens_per_hash`` tokens (the last block may be shorter), each chained
    on the one before (the first on ``previous``: the hash of the tokens before ``tokens``),
    so that it stands for the whole prefix it ends."""
    tokens_per_hash = check_param("tokens_per_hash", tokens_per_hash)
    if isinstance(tokens, (str, bytes)) or not hasattr(tokens, "__len__"):
        raise TypeError(f"tokens must be a sequence of token ids, got {tokens!r:.60}")
    hashes = []
    for start in range(0, len(tokens), tokens_per_hash):
        previous = hash((previous, tuple(tokens[start : start + tokens_per_hash])))
        hashes.append(previous)
    return tuple(hashes)


def prefix_key(hashes: tuple[int, ...], tokens_per_hash: int, end: int) -> BlockKey:
    """The identity of a prompt's first ``end`` tokens (0 < end <= the tokens the hashes cover):
    the hash of the block holding token ``end``, and ``end``."""
    return hashes[(end - 1) // tokens_per_hash], end


def parent_key(hashes: tuple[int, ...], tokens_per_hash: int, start: int, root: int) -> BlockKey:
    """The node a page starting at token ``start`` hangs under: the key of the prefix before
    it, or the root of its reuse scope (``root``: :func:`scope_seed`)."""
    return prefix_key(hashes, tokens_per_hash, start) if start else (root, 0)


def hashed_tokens(request: Request) -> int:
    """The leading prompt tokens the request's hashes identify."""
    return min(request.prompt_len, len(request.prefix_hashes) * request.tokens_per_hash)


class Match(NamedTuple):
    """What :meth:`PrefixCache.match` found: committed ``pages`` to hold, and a ``partial``
    page to copy ``partial_tokens`` leading tokens from (None: no partial match); ``tokens``
    in all."""

    pages: list[int]
    partial: int | None
    partial_tokens: int
    tokens: int


class PrefixCache:
    """The committed pages of one pool (module docstring). A committed page is an entry of
    ``_pages`` (its key -> the page) and, by page number, its key, the hashes that made it and
    its holders; no object per page, so a replay's millions of commits cost a dict entry each
    and nothing for the garbage collector. The bytes of the pages below are one host tensor."""

    def __init__(
        self,
        pool: PagePool,
        tokens_per_block: int,
        enable_partial_reuse: bool = True,
        host_tier: HostTier | None = None,
    ):
        self.pool = pool
        self.tokens_per_block = tokens_per_block
        self.enable_partial_reuse = enable_partial_reuse
        self._pages: dict[BlockKey, int] = {}  # key -> committed page
        #: the tier below the GPU that evicted pages move down to (None: they are dropped);
        #: a page number from ``first_host_page`` on is a page there
        self.host_tier = host_tier
        self.first_host_page = pool.num_blocks
        host = 0 if host_tier is None else host_tier.num_blocks
        self._free_host_pages = list(range(pool.num_blocks + host - 1, pool.num_blocks - 1, -1))
        #: the bytes of the pages below, row ``page - first_host_page`` (a real host tensor,
        #: grown as its pages are first used, up to the tier's size)
        self._below = torch.empty((0, pool.bytes_per_block), dtype=torch.uint8)
        #: host pages no cache holds, least recently moved down first
        self._host_evictable: OrderedDict[int, None] = OrderedDict()
        blocks = pool.num_blocks + host
        self._key: list[BlockKey | None] = [None] * blocks  # page -> its key, None if uncommitted
        self._source: list[Source | None] = [None] * blocks
        self._holders: list[int] = [0] * blocks
        self._parent: list[BlockKey | None] = [None] * blocks  # page -> the node it hangs under
        #: node -> committed pages hanging under it (its children in upstream's tree)
        self._children: dict[BlockKey, int] = {}
        #: pages dropped from the tree (a longer partial sibling replaced them) that a cache
        #: still holds; each goes back to the pool when its last holder lets go
        self.orphaned_blocks = 0
        #: pages no cache holds, least recently released first, each with its release tick
        self._evictable: OrderedDict[int, int] = OrderedDict()
        #: the eviction clock: ticks order releases here and suspensions in the tier below, so
        #: that both kinds go in one least-recently-used order (kvlab.core.host_tier)
        self.clock = itertools.count()
        #: how many (a plain count: the pool's availability reads it on every pass)
        self.evictable_blocks = 0
        #: the partial-match candidates a key lookup cannot find (see :meth:`_indexed`), by
        #: (hash of the block holding the page's first token, the page's start)
        self._by_first_block: dict[BlockKey, list[int]] = {}
        self.evicted_blocks = 0

    # -- counts ------------------------------------------------------------------------
    @property
    def committed_blocks(self) -> int:
        """Committed pages, on the GPU or below."""
        return len(self._pages)

    @property
    def host_blocks(self) -> int:
        """Committed pages in the tier below the GPU."""
        return len(self._holders) - self.first_host_page - len(self._free_host_pages)

    @property
    def pinned_host_blocks(self) -> int:
        """Committed pages below that a cache holds (while it copies them up): not droppable."""
        return self.host_blocks - len(self._host_evictable)

    def is_below(self, page: int) -> bool:
        """``page`` is in the tier below the GPU."""
        return page >= self.first_host_page

    def page_bytes(self, page: int) -> torch.Tensor:
        """A committed page's bytes, on the GPU or below."""
        below = page - self.first_host_page
        return self._below[below] if below >= 0 else self.pool.storage[page]

    def key_of(self, page: int) -> BlockKey | None:
        """The key a committed page is stored under (the prefix it ends), None if uncommitted."""
        return self._key[page]

    def is_committed(self, page: int) -> bool:
        return self._key[page] is not None

    def release_ticks(self) -> Iterator[int]:
        """The release ticks of the evictable pages, least recently released first."""
        return iter(self._evictable.values())

    def evict(self, count: int) -> list[int]:
        """Evict ``count`` cached GPU pages no cache holds, least recently released first, and
        return them for the pool: the most recent ones the tier below has room for move down,
        keeping their keys (older pages there are dropped to make room), the others are dropped
        (upstream's ``_prepare_free_slots``, _storage_manager.py)."""
        if count <= 0:
            return []
        popitem = self._evictable.popitem
        freed = [popitem(last=False)[0] for _ in range(count)]
        moving = min(count, self._host_room())
        self._forget(freed[: count - moving])
        if moving:
            self._move_down(freed[count - moving :])
        self.evicted_blocks += count
        self.evictable_blocks -= count
        return freed

    def _host_room(self) -> int:
        """Host pages cached pages may take: the tier's pages but the suspended caches' and
        the pinned ones."""
        host_tier = self.host_tier
        if host_tier is None:
            return 0
        return host_tier.num_blocks - host_tier.used_blocks - self.pinned_host_blocks

    def make_host_room(self, count: int) -> None:
        """Drop the least recently moved-down pages below until ``count`` more host pages are
        free for suspended caches."""
        host_tier = self.host_tier
        if host_tier is None:  # no page of ours below
            return
        excess = host_tier.used_blocks + count + self.host_blocks - host_tier.num_blocks
        self._free_host_pages += self._drop_oldest_below(max(0, excess))

    def _drop_oldest_below(self, count: int) -> list[int]:
        """Take the ``count`` least recently moved-down pages below out of the tree; their
        host pages, for the caller to free or fill."""
        popitem = self._host_evictable.popitem
        oldest = [popitem(last=False)[0] for _ in range(count)]
        self._forget(oldest)
        return oldest

    def _move_down(self, pages: list[int]) -> None:
        """Cached GPU pages move to the tier below, keeping their keys, their bytes in one
        copy; each takes the place of the least recently moved-down page there when the tier
        is full."""
        host_tier = self.host_tier
        assert host_tier is not None, "no tier below to move down to"
        room = host_tier.num_blocks - host_tier.used_blocks - self.host_blocks
        dropped = max(0, len(pages) - room)  # older pages there than the tier has room for
        free = self._free_host_pages
        hosts = [free.pop() for _ in range(len(pages) - dropped)]
        hosts += self._drop_oldest_below(dropped)
        self._relocate(pages, hosts)
        self._host_evictable.update(dict.fromkeys(hosts))
        rows = [host - self.first_host_page for host in hosts]
        needed = max(rows) + 1
        if needed > len(self._below):
            self._grow_below(needed)
        put_pages(self._below, rows, take_pages(self.pool.storage, pages))

    def _grow_below(self, rows: int) -> None:
        """Room for at least ``rows`` pages below: twice as many, at most the tier's."""
        tier = len(self._holders) - self.first_host_page
        grown = torch.empty(
            (min(max(rows, 2 * len(self._below)), tier), self.pool.bytes_per_block),
            dtype=torch.uint8,
        )
        grown[: len(self._below)] = self._below
        self._below = grown

    def move_up(self, hosts: list[int], pages: list[int]) -> None:
        """Pages below come back into the GPU ``pages``, in order, with their keys and holders,
        their bytes in one copy."""
        rows = [host - self.first_host_page for host in hosts]
        put_pages(self.pool.storage, pages, take_pages(self._below, rows))
        self._relocate(hosts, pages)
        self._free_host_pages += hosts

    def _relocate(self, olds: list[int], news: list[int]) -> None:
        """Committed pages' keys, sources, parents and holders move from pages ``olds`` to
        ``news`` (the tree keeps the keys: upstream moves a page between levels in place)."""
        keys, sources, parents, holders = self._key, self._source, self._parent, self._holders
        committed, spans = self._pages, self._spans
        for old, new in zip(olds, news):
            key, source = keys[old], sources[old]
            assert key is not None and source is not None, f"page {old} is not committed"
            indexed = spans(key, source)
            if indexed:
                self._unindex(old)
            committed[key] = new
            keys[new], sources[new] = key, source
            parents[new], holders[new] = parents[old], holders[old]
            keys[old] = sources[old] = parents[old] = None
            holders[old] = 0
            if indexed:
                self._by_first_block.setdefault(self._first_block(new), []).append(new)

    def _forget(self, pages: list[int]) -> None:
        """Take committed pages out of the tree (their holders are the caller's business)."""
        keys, sources, parents, children = self._key, self._source, self._parent, self._children
        committed, spans = self._pages, self._spans
        for page in pages:
            key, source, parent = keys[page], sources[page], parents[page]
            assert key is not None and source is not None and parent is not None, (
                f"page {page} is not committed"
            )
            if spans(key, source):
                self._unindex(page)
            del committed[key]
            keys[page] = sources[page] = parents[page] = None
            siblings = children[parent] - 1
            if siblings:
                children[parent] = siblings
            else:
                del children[parent]

    # -- the partial-match index -------------------------------------------------------
    def _indexed(self, page: int) -> bool:
        """Whether ``page`` is in the partial-match index: a partial page (its prefix ends
        inside it), or one whose tokens span hash blocks. A whole page inside one hash block
        is found by key: a prompt agreeing with it in that block has that page's key."""
        return self._spans(*self._committed(page))

    def _spans(self, key: BlockKey, source: Source) -> bool:
        """:meth:`_indexed` from the page's key and source."""
        return key[1] % self.tokens_per_block != 0 or source[1] % self.tokens_per_block != 0

    def _committed(self, page: int) -> tuple[BlockKey, Source]:
        """A committed page's key and source."""
        key, source = self._key[page], self._source[page]
        assert key is not None and source is not None, f"page {page} is not committed"
        return key, source

    def _first_block(self, page: int) -> BlockKey:
        tokens_per_block = self.tokens_per_block
        (_, end), (hashes, per_hash) = self._committed(page)
        start = (end - 1) // tokens_per_block * tokens_per_block
        return hashes[start // per_hash], start

    def _unindex(self, page: int) -> None:
        first_block = self._first_block(page)
        candidates = self._by_first_block[first_block]
        if len(candidates) == 1:
            del self._by_first_block[first_block]
        else:
            candidates.remove(page)

    # -- lookup ------------------------------------------------------------------------
    def match(self, request: Request, limit: int) -> Match:
        """The committed pages holding the request's first tokens, at most ``limit`` of them,
        and (with partial reuse) the page after them sharing the most leading tokens."""
        tokens_per_block = self.tokens_per_block
        hashes, per_hash = request.scoped_hashes, request.tokens_per_hash
        usable = min(limit, hashed_tokens(request))
        found = self._committed_prefix(hashes, per_hash, usable)
        start = len(found) * tokens_per_block
        partial, partial_tokens = None, 0
        if (
            self.enable_partial_reuse
            and start < usable
            and self._children.get(
                parent_key(hashes, per_hash, start, scope_seed(request.cache_salt)), 0
            )
            < PARTIAL_MATCH_MAX_CHILDREN
        ):
            for candidate in self._siblings(hashes, per_hash, start):
                shared = self._shared_tokens(candidate, hashes, per_hash, start, usable) - start
                if shared > partial_tokens:
                    partial, partial_tokens = candidate, shared
        return Match(found, partial, partial_tokens, start + partial_tokens)

    def _siblings(self, hashes: tuple[int, ...], per_hash: int, start: int) -> list[int]:
        """The committed pages starting at token ``start`` that may share leading tokens with
        the prompt of ``hashes`` (those agreeing with it in the hash block holding ``start``)."""
        candidates = list(self._by_first_block.get((hashes[start // per_hash], start), ()))
        if per_hash % self.tokens_per_block == 0:  # the whole page inside one hash block
            whole = self._pages.get((hashes[start // per_hash], start + self.tokens_per_block))
            if whole is not None:
                candidates.append(whole)
        return candidates

    def first_new_key(self, request: Request, known: int = 0) -> BlockKey | None:
        """The key of the request's first whole prompt page not committed, or None when every
        whole page is. ``known``: leading pages known to be committed (a cache's own, which
        stay in the tree while it holds them): the walk starts past them, and answers as a
        walk from the first page would."""
        hashes, per_hash = request.scoped_hashes, request.tokens_per_hash
        usable = hashed_tokens(request)
        found = known + len(self._committed_prefix(hashes, per_hash, usable, known))
        end = (found + 1) * self.tokens_per_block
        return prefix_key(hashes, per_hash, end) if end <= usable else None

    def _committed_prefix(
        self, hashes: tuple[int, ...], per_hash: int, usable: int, skip: int = 0
    ) -> list[int]:
        """The committed pages holding a prompt's first whole pages past the first ``skip``, in
        order, within ``usable`` tokens (the walk stops at the first page not committed)."""
        tokens_per_block, get = self.tokens_per_block, self._pages.get
        found, end = [], (skip + 1) * tokens_per_block
        while end <= usable:
            page = get((hashes[(end - 1) // per_hash], end))
            if page is None:
                break
            found.append(page)
            end += tokens_per_block
        return found

    def _shared_tokens(
        self, page: int, hashes: tuple[int, ...], per_hash: int, start: int, usable: int
    ) -> int:
        """How far the prompt of ``hashes`` agrees with the prefix ``page`` ends, from
        ``start`` (both agree before it), within ``usable`` tokens: whole hash blocks only."""
        (_, page_end), (other, other_per_hash) = self._committed(page)
        if other_per_hash != per_hash:
            return start
        end = min(page_end, usable)
        for block in range(start // per_hash, (end - 1) // per_hash + 1):
            if block >= len(other) or other[block] != hashes[block]:
                return max(start, block * per_hash)
        return end

    def hold(self, pages: Sequence[int]) -> None:
        """A cache holds committed ``pages`` (evictable ones stop being)."""
        evictable, holders, below = self._evictable, self._holders, self.first_host_page
        for page in pages:
            if holders[page] == 0:
                if page >= below:
                    del self._host_evictable[page]
                else:
                    del evictable[page]
                    self.evictable_blocks -= 1
            holders[page] += 1

    def release(self, pages: Sequence[int]) -> list[int]:
        """A cache lets go of committed ``pages``; those no cache holds become evictable, the
        last page first. Returns the orphaned ones no cache holds now, for the pool."""
        evictable, holders, keys, freed = self._evictable, self._holders, self._key, []
        tick, below = next(self.clock), self.first_host_page
        for page in reversed(pages):
            holders[page] -= 1
            if holders[page] == 0:
                if keys[page] is None:  # dropped from the tree while held
                    freed.append(page)
                elif page >= below:
                    self._host_evictable[page] = None
                else:
                    evictable[page] = tick
                    self.evictable_blocks += 1
        self.orphaned_blocks -= len(freed)
        return freed

    # -- commit ------------------------------------------------------------------------
    def commit(
        self, pages: list[int], committed: int, request: Request, end: int, last: bool
    ) -> tuple[int, list[tuple[int, int]], list[int]]:
        """Commit a cache's ``pages`` holding the request's first ``end`` prompt tokens, from
        its ``committed`` first on (full pages; with ``last``, the partial page that ends the
        prompt too). Returns the new committed count; for each page whose key is committed
        already, (its index, the tree's page) to rebase onto (its own goes back to the pool);
        and the pages a longer partial page replaced that no cache holds, for the pool."""
        tokens_per_block = self.tokens_per_block
        hashes, per_hash = request.scoped_hashes, request.tokens_per_hash
        end = min(end, hashed_tokens(request), len(pages) * tokens_per_block)
        index = committed
        rebased: list[tuple[int, int]] = []
        freed: list[int] = []
        if index * tokens_per_block >= end:
            return index, rebased, freed  # nothing past what is committed
        page_end = (index + 1) * tokens_per_block
        source, indexed = (hashes, per_hash), per_hash % tokens_per_block != 0
        # the node each page hangs under: the page before it's key
        parent = parent_key(
            hashes, per_hash, index * tokens_per_block, scope_seed(request.cache_salt)
        )
        while page_end <= end:
            key = (hashes[(page_end - 1) // per_hash], page_end)
            page = self._pages.get(key)
            if page is not None and page >= self.first_host_page:  # below: replaced
                self._drop(page, freed)
                page = None
            if page is None:
                self._insert(key, pages[index], source, indexed, parent, freed)
            elif page != pages[index]:  # computed twice: rebase onto the tree's page
                self.hold([page])
                rebased.append((index, page))
            parent = key
            index += 1
            page_end += tokens_per_block
        if last and end == request.prompt_len and index * tokens_per_block < end:
            if not self._covered(source, end):  # else the cache stops committing there
                key = prefix_key(hashes, per_hash, end)
                self._insert(key, pages[index], source, True, parent, freed)
                index += 1
        return index, rebased, freed

    def _drop(self, page: int, freed: list[int]) -> None:
        """Take a committed page out of the tree: below, its host page is freed; on the GPU, to
        ``freed`` if no cache holds it, else orphaned until its holders let go."""
        if page >= self.first_host_page:
            del self._host_evictable[page]  # a page below is held only while copied up
            self._forget([page])
            self._free_host_pages.append(page)
            return
        self._forget([page])
        if self._holders[page]:
            self.orphaned_blocks += 1
        else:
            del self._evictable[page]
            self.evictable_blocks -= 1
            freed.append(page)

    def _covered(self, source: Source, end: int) -> bool:
        """A committed page holds every token of the partial page ending the prompt of
        ``source`` at ``end`` (upstream's ``UselessBlockError``: it is not inserted)."""
        hashes, per_hash = source
        start = (end - 1) // self.tokens_per_block * self.tokens_per_block
        return any(
            self._shared_tokens(sibling, hashes, per_hash, start, end) == end
            for sibling in self._siblings(hashes, per_hash, start)
        )

    def _insert(
        self,
        key: BlockKey,
        page: int,
        source: Source,
        indexed: bool,
        parent: BlockKey,
        freed: list[int],
    ) -> None:
        """Commit ``page`` under ``key``, hanging under ``parent``, held by the cache that
        computed it. A shorter partial sibling holding a prefix of its tokens is replaced
        (``Block.__init__`` of _block_radix_tree.py): dropped from the tree, to ``freed`` if
        no cache holds it."""
        hashes, per_hash = source
        end = key[1]
        start = (end - 1) // self.tokens_per_block * self.tokens_per_block
        # shorter siblings are partial pages, all in the partial-match index (a whole one that
        # :meth:`_siblings` finds by key ends at ``start + tokens_per_block``, never before)
        siblings = self._by_first_block.get((hashes[start // per_hash], start))
        for sibling in list(siblings) if siblings else ():
            sibling_end = self._committed(sibling)[0][1]
            if (
                sibling_end < end
                and self._shared_tokens(sibling, hashes, per_hash, start, end) == sibling_end
            ):
                self._drop(sibling, freed)
        self._pages[key] = page
        self._key[page], self._source[page], self._holders[page] = key, source, 1
        self._parent[page] = parent
        self._children[parent] = self._children.get(parent, 0) + 1
        if indexed:
            self._by_first_block.setdefault(self._first_block(page), []).append(page)

    # -- checks ------------------------------------------------------------------------
    def check_invariants(self, holders: dict[int, int]) -> None:
        """``holders``: committed page -> caches holding it, counted by the manager."""
        assert len(self._pages) == sum(key is not None for key in self._key)
        assert self.evictable_blocks == len(self._evictable), "the evictable count drifted"
        free_below = set(self._free_host_pages)
        assert len(free_below) == len(self._free_host_pages), "a host page is free twice"
        assert not free_below & set(self._host_evictable), "an evictable page below is free"
        if self.host_tier is not None:
            assert self.host_tier.used_blocks + self.host_blocks <= self.host_tier.num_blocks
        for key, page in self._pages.items():
            assert self._key[page] == key, f"committed page {page}: key disagrees"
            assert self._indexed(page) == (
                page in self._by_first_block.get(self._first_block(page), ())
            )
            if page >= self.first_host_page:
                assert page not in free_below, f"committed page {page} below is free"
                assert (self._holders[page] == 0) == (page in self._host_evictable), page
                continue
            assert self.pool.is_allocated(page), f"committed page {page} is free in the pool"
            assert self._holders[page] == holders.get(page, 0), (
                f"committed page {page}: {self._holders[page]} holders counted, "
                f"{holders.get(page, 0)} found"
            )
            assert (self._holders[page] == 0) == (page in self._evictable), (
                f"committed page {page}: holders {self._holders[page]}, evictable "
                f"{page in self._evictable}"
            )
        orphans = [page for page in holders if self._key[page] is None]
        assert len(orphans) == self.orphaned_blocks, "the orphaned count drifted"
        for page in orphans:
            assert self._holders[page] == holders[page], f"orphaned page {page}: holders"
        parents = [self._parent[page] for page in self._pages.values()]
        assert self._children == dict(Counter(parents)), "the children counts drifted"

    def __repr__(self) -> str:
        return (
            f"PrefixCache({self.committed_blocks} committed pages, {self.evictable_blocks} "
            f"evictable, {self.evicted_blocks} evicted)"
        )
