"""SGLang 0.5.23's radix cache as the SGLang peer uses it (part of kvlab.sched.sglang): a radix
tree over token ids with page_size 1, its locks and its LRU eviction, as the Python twin of its
tree core does it (sglang/srt/mem_cache/unified_cache/unified_tree_core.py, selected with
``SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python``; the shipped Rust core behaves the same) with
one FULL component (unified_cache/components/full.py).

The tree counts tokens; which pool slots hold them is the peer's manager's business.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

#: How much older each ancestor of a matched node is stamped than the node
#: (``_match_post_processor``: ``cur_time -= 0.00001``).
ANCESTOR_STAMP_STEP = 0.00001


class RadixNode:
    """A tree node: ``key`` the token ids it adds to its parent's path, ``lock_ref`` how many
    requests lock it, ``last_access_time`` its LRU stamp."""

    __slots__ = ("key", "parent", "children", "lock_ref", "last_access_time")

    def __init__(self, key: tuple[int, ...], parent: RadixNode | None, stamp: float):
        self.key = key
        self.parent = parent
        self.children: dict[int, RadixNode] = {}
        self.lock_ref = 0
        self.last_access_time = stamp

    def __lt__(self, other: RadixNode) -> bool:  # the eviction heap's order (LRUStrategy)
        return self.last_access_time < other.last_access_time

    def __repr__(self) -> str:
        return f"RadixNode({len(self.key)} tokens, lock_ref={self.lock_ref})"


#: Ids compared a slice at a time before the walk id by id (:func:`_common_len`).
_COMPARED_AT_ONCE = 256


def _common_len(key: tuple[int, ...], tokens: Sequence[int], start: int) -> int:
    """How many of ``key``'s ids ``tokens[start:]`` begins with (whole slices compared first:
    a request's own path is thousands of ids long)."""
    n = min(len(key), len(tokens) - start)
    done = 0
    while done < n:
        end = min(done + _COMPARED_AT_ONCE, n)
        if key[done:end] != tuple(tokens[start + done : start + end]):
            break
        done = end
    for i in range(done, min(done + _COMPARED_AT_ONCE, n)):
        if key[i] != tokens[start + i]:
            return i
    return n


class RadixTree:
    """The tree, its ``evictable_size`` (tokens no request locks) and ``protected_size``, and
    the logical clock its LRU reads (``get_and_increase_time_counter``,
    unified_cache/components/base.py:161-165): a new node takes two ticks (its access and
    creation times), a touch or a match one."""

    def __init__(self) -> None:
        self.clock = 0.0
        self.root = self._node((), None)
        self.evictable_size = 0
        self.protected_size = 0
        #: unlocked leaves but the root (``evictable_device_leaves``)
        self._leaves: set[RadixNode] = set()

    def _tick(self) -> float:
        stamp = self.clock
        self.clock += 1.0
        return stamp

    def _node(self, key: tuple[int, ...], parent: RadixNode | None) -> RadixNode:
        node = RadixNode(key, parent, self._tick())
        self._tick()  # creation_time
        return node

    def _refresh_leaf(self, node: RadixNode) -> None:
        """``_update_evictable_leaf_sets``."""
        if node is not self.root and node.lock_ref == 0 and not node.children:
            self._leaves.add(node)
        else:
            self._leaves.discard(node)

    def _split(self, child: RadixNode, length: int) -> RadixNode:
        """``_split_node`` (unified_tree_core.py:1467): a new node holds ``child``'s first
        ``length`` ids and its locks; ``child`` keeps the rest, stamped anew."""
        parent = child.parent
        assert parent is not None, "the root is never split"
        head = self._node(child.key[:length], parent)
        head.lock_ref = child.lock_ref
        parent.children[child.key[0]] = head
        child.key = child.key[length:]
        child.parent = head
        head.children[child.key[0]] = child
        child.last_access_time = self._tick()
        self._refresh_leaf(head)
        self._refresh_leaf(child)
        return head

    def match(self, tokens: Sequence[int]) -> tuple[int, RadixNode]:
        """``match_prefix`` (unified_tree_core.py:886-1068): the longest cached prefix of
        ``tokens`` (a node ending inside it is split there) and its last node, whose path is
        stamped; no tick for empty ``tokens``."""
        if not tokens:
            return 0, self.root
        node, matched = self.root, 0
        while matched < len(tokens) and tokens[matched] in node.children:
            child = node.children[tokens[matched]]
            length = _common_len(child.key, tokens, matched)
            matched += length
            if length < len(child.key):
                node = self._split(child, length)
                break
            node = child
        stamp = self._tick()
        walk: RadixNode | None = node
        while walk is not None:
            walk.last_access_time = stamp
            stamp -= ANCESTOR_STAMP_STEP
            walk = walk.parent
        return matched, node

    def insert(self, tokens: Sequence[int], owned_from: int) -> tuple[RadixNode, int, int]:
        """``begin_insert`` and its walk (unified_tree_core.py:1129-1460) of a request's
        ``tokens``, the first ``owned_from`` of which it reads from the tree already: the node
        the path ends on, how many of the request's own tokens the tree held already (the
        request frees them), and how many a new leaf takes over from the request."""
        self.root.last_access_time = self._tick()
        node, done, duplicates = self.root, 0, 0
        while done < len(tokens) and tokens[done] in node.children:
            child = node.children[tokens[done]]
            child.last_access_time = self._tick()  # _touch_node
            length = _common_len(child.key, tokens, done)
            if length < len(child.key):
                child = self._split(child, length)
            duplicates += max(0, length - max(0, owned_from - done))
            node, done = child, done + length
        new = len(tokens) - done
        if new:
            leaf = self._node(tuple(tokens[done:]), node)
            node.children[leaf.key[0]] = leaf
            self.evictable_size += new
            self._refresh_leaf(leaf)
            self._refresh_leaf(node)
            node = leaf
        return node, duplicates, new

    def lock(self, node: RadixNode) -> None:
        """``inc_lock_ref`` (full.py:282-329): the node and its ancestors, their tokens
        protected from eviction."""
        while node is not self.root:
            if node.lock_ref == 0:
                self.evictable_size -= len(node.key)
                self.protected_size += len(node.key)
            node.lock_ref += 1
            self._leaves.discard(node)
            assert node.parent is not None
            node = node.parent

    def unlock(self, node: RadixNode) -> None:
        """``dec_lock_ref`` (full.py:331-375)."""
        while node is not self.root:
            assert node.lock_ref > 0, f"{node!r} is not locked"
            if node.lock_ref == 1:
                self.evictable_size += len(node.key)
                self.protected_size -= len(node.key)
            node.lock_ref -= 1
            self._refresh_leaf(node)
            assert node.parent is not None
            node = node.parent

    def evict(self, num_tokens: int) -> int:
        """Evict unlocked leaves whole, least recently used first, until ``num_tokens`` are
        freed or none is left (full.py:209-244, evict_policy.py ``LRUStrategy``); a parent left
        an unlocked leaf joins the heap. The tokens freed."""
        heap = list(self._leaves)
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None and leaf in self._leaves
            del parent.children[leaf.key[0]]
            self._leaves.discard(leaf)
            self.evictable_size -= len(leaf.key)
            freed += len(leaf.key)
            self._refresh_leaf(parent)
            if parent in self._leaves:
                heapq.heappush(heap, parent)
        return freed

    def check_invariants(self) -> None:
        """Raise AssertionError unless the sizes and the leaf set agree with the nodes."""
        evictable = protected = 0
        leaves = set()
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            assert node.key and node.parent is not None and node.lock_ref >= 0
            if node.lock_ref:
                protected += len(node.key)
            else:
                evictable += len(node.key)
                if not node.children:
                    leaves.add(node)
            stack += node.children.values()
        assert (evictable, protected) == (self.evictable_size, self.protected_size), (
            f"sizes drifted: counted {evictable} evictable, {protected} protected; kept "
            f"{self.evictable_size}, {self.protected_size}"
        )
        assert leaves == self._leaves, "the evictable leaves drifted"

    def __repr__(self) -> str:
        return f"RadixTree({self.evictable_size} evictable, {self.protected_size} protected)"
