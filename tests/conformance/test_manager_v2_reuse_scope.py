"""TensorRT-LLM's own tests of the V2 manager's reuse scopes, ported onto kvlab's public API.

Upstream: NVIDIA/TensorRT-LLM, ``tests/unittest/kv_cache_manager_v2_tests/test_kv_cache_salting.py``
at commit 222982db69cbca3b5cde446df4a773e6632d5c5e (inventory:
``inventory/manager_v2_reuse_scope.txt``).

Upstream keys every block by a chain of SHA-256 digests rooted at its request's ``ReuseScope``
(LoRA id and cache salt). kvlab's scope is the request's ``cache_salt`` alone (kvlab has no
LoRA): ``Request.scoped_hashes`` are its prompt hashes mixed with the salt's digest, and the
prefix cache stores and finds pages by them. The radix tree is kvlab's PrefixCache, its
``match`` the tree's.
"""

from __future__ import annotations

import pytest

from kvlab import KVCacheManager, KVGeometry, Request
from kvlab.core.prefix_cache import chain_hashes
from kvlab.core.reuse_scope import scope_seed, scoped_hashes

TOKENS_PER_BLOCK = 2
NO_LORA = (
    "kvlab's reuse scope is the cache salt alone (kvlab has no LoRA), so the scopes are "
    "salts: None, the empty salt and others"
)


@pytest.mark.upstream("TestReuseScope::test_reuse_scope_seeds_distinct_keys", adaptation=NO_LORA)
def test_reuse_scope_seeds_distinct_keys():
    scopes = [None, "", "0", "7", "7:11"]
    tokens = [1, 2]

    def root_key(salt):
        return scoped_hashes(chain_hashes(tokens, TOKENS_PER_BLOCK), salt)[0]

    roots = [root_key(salt) for salt in scopes]
    assert len(set(roots)) == len(scopes)
    assert len({scope_seed(salt) for salt in scopes}) == len(scopes)
    # deterministic across repeated derivation
    assert roots == [root_key(salt) for salt in scopes]


@pytest.mark.upstream(
    "TestReuseScope::test_blockchain_keys_are_seeded_by_reuse_scope", adaptation=NO_LORA
)
def test_blockchain_keys_are_seeded_by_reuse_scope():
    tokens = [1, 2, 3, 4]
    hashes = chain_hashes(tokens, TOKENS_PER_BLOCK)
    keys = scoped_hashes(hashes, "7:11")
    same_scope_keys = scoped_hashes(chain_hashes(tokens, TOKENS_PER_BLOCK), "7:11")
    different_scope_keys = scoped_hashes(hashes, "7:12")
    assert keys == same_scope_keys
    assert all(a != b for a, b in zip(keys, different_scope_keys))


@pytest.mark.upstream(
    "TestReuseScope::test_radix_tree_match_is_scoped",
    adaptation=NO_LORA + ". Upstream inserts a block into a bare tree; kvlab commits it by "
    "running a context of the same two tokens through a manager (tokens_per_block 2), then "
    "asks the manager's prefix cache for the same matches",
)
def test_radix_tree_match_is_scoped():
    geometry = KVGeometry(
        num_layers=1,
        num_kv_heads=1,
        head_dim=1,
        dtype="float16",
        tokens_per_block=TOKENS_PER_BLOCK,
    )
    manager = KVCacheManager(
        geometry,
        quota_bytes=8 * geometry.bytes_per_block,
        max_seq_len=8 * TOKENS_PER_BLOCK,
        max_batch_size=2,
        host_cache_size=0,
    )
    tokens = [1, 2]

    def request(request_id, tokens, salt):
        return Request(
            request_id,
            len(tokens),
            1,
            prefix_hashes=chain_hashes(tokens, TOKENS_PER_BLOCK),
            tokens_per_hash=TOKENS_PER_BLOCK,
            cache_salt=salt,
        )

    scope, other_scope = "7:11", "7:12"
    writer = request("w", tokens, scope)
    assert manager.prepare_context(writer) and manager.resize_context(writer, len(tokens))
    writer.context_current_position = len(tokens)
    manager.update_context(writer)
    (block,) = manager.get_cache(writer).pages
    tree = manager.prefix_cache

    match = tree.match(request("a", tokens, scope), len(tokens))
    assert match.pages == [block]
    assert match.tokens == len(tokens)

    match = tree.match(request("b", tokens, other_scope), len(tokens))
    assert match.pages == [] and match.partial is None
    assert match.tokens == 0

    match = tree.match(request("c", tokens[:1], other_scope), 1)  # partial matching on
    assert match.pages == [] and match.partial is None
    assert match.tokens == 0
    manager.check_invariants()
