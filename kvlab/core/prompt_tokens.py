"""A prompt's token ids: the one convention kvlab's peers and the real engines' drivers share, so
that a prefix cache on either side sees the same sharing.

``Request.prefix_hashes`` stands for blocks of ``tokens_per_hash`` prompt tokens (Mooncake's
``hash_ids``: 512 each). A hash's block is always the same tokens: five ids that spell the hash,
then ids counting up from 1. So equal hash prefixes are equal tokens, different hashes differ
in their block's first tokens, and a short last block is the first tokens of its hash's block.
The tokens past the hashes, all of a prompt without hashes, are a block spelling the request's
own id, which no other request shares. Ids lie in [1, VOCAB_SIZE), as a tokenizer's would.
"""

from __future__ import annotations

import hashlib

from kvlab.core.request import Request

#: The vocabulary the ids lie in (0 is never used).
VOCAB_SIZE = 32000
#: The token every driver's stand-in model samples, and the peers append as output.
SAMPLED_TOKEN_ID = 7
#: Ids that spell a block's key: 31999**5 > 2**65, enough for a 64-bit hash and an own key.
KEY_IDS = 5
_BASE = VOCAB_SIZE - 1
_OWN = 1 << 64  # own keys lie above every hash taken modulo 2**64
#: Every id, once: a prompt's ids are slices of it, sharing its int objects.
_IDS = tuple(range(VOCAB_SIZE))


def prompt_token_runs(request: Request) -> list[tuple[int, int]]:
    """The request's prompt ids as runs ``(first id, count)`` of consecutive ids: the compact
    form drivers are sent."""
    per_hash, prompt_len = request.tokens_per_hash, request.prompt_len
    runs: list[tuple[int, int]] = []
    start = 0
    for block_hash in request.prefix_hashes:
        runs += _block_runs(block_hash % _OWN, min(per_hash, prompt_len - start))
        start += per_hash
    if start < prompt_len:
        digest = hashlib.blake2b(request.request_id.encode(), digest_size=8).digest()
        runs += _block_runs(_OWN + int.from_bytes(digest, "little"), prompt_len - start)
    return runs


def prompt_token_ids(request: Request) -> list[int]:
    """The request's prompt ids (:func:`prompt_token_runs`, spelled out)."""
    ids: list[int] = []
    for first, count in prompt_token_runs(request):
        ids += _IDS[first : first + count]
    return ids


def _block_runs(key: int, length: int) -> list[tuple[int, int]]:
    """The first ``length`` ids of ``key``'s block: its :data:`KEY_IDS` digits in base
    VOCAB_SIZE - 1 (least significant first, each + 1), then 1, 2, 3, ... wrapping."""
    runs = []
    for _ in range(min(KEY_IDS, length)):
        key, digit = divmod(key, _BASE)
        runs.append((digit + 1, 1))
    rest = length - len(runs)
    while rest > 0:
        runs.append((1, min(rest, _BASE)))
        rest -= _BASE
    return runs


__all__ = ["KEY_IDS", "SAMPLED_TOKEN_ID", "VOCAB_SIZE", "prompt_token_ids", "prompt_token_runs"]
