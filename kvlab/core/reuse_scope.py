"""Reuse scopes: prompts share committed pages only within their scope, the request's
``cache_salt`` (upstream's ``ReuseScope`` of a LoRA id and a salt roots each scope's chain of
block keys at its own digest: tensorrt_llm/runtime/kv_cache_manager_v2/_block_radix_tree.py
``sequence_to_blockchain_keys``, read at commit 065ff9e93780bc0bdbfdbc7156a306ca14f5850c;
kvlab has no LoRA)."""

from __future__ import annotations

import hashlib


def scope_seed(cache_salt: str | None) -> int:
    """The reuse scope a ``cache_salt`` names, as an int (0: no salt): a digest, stable across
    processes (upstream hashes the scope with SHA-256: ``ReuseScope``, ``Hasher``)."""
    if cache_salt is None:
        return 0
    return int.from_bytes(hashlib.sha256(cache_salt.encode()).digest()[:8], "little") | 1


def scoped_hashes(hashes: tuple[int, ...], cache_salt: str | None) -> tuple[int, ...]:
    """``hashes`` under the scope of ``cache_salt``: as they are without one, else each mixed
    with the scope, so that no key of one scope is another's (upstream roots each scope's
    chain at its own digest: ``sequence_to_blockchain_keys``)."""
    seed = scope_seed(cache_salt)
    return tuple(hash((seed, h)) for h in hashes) if seed else hashes
