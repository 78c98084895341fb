"""kvlab.core.prompt_tokens: the token ids a request's prefix hashes stand for, shared by the peers
and the real engines' drivers."""

from __future__ import annotations

import pytest

from kvlab.core.prompt_tokens import (
    KEY_IDS,
    VOCAB_SIZE,
    prompt_token_ids,
    prompt_token_runs,
)
from kvlab.core.request import Request
from kvlab.run.workload import mooncake_trace


def hashed(request_id: str, prompt_len: int, hashes: tuple[int, ...], per_hash: int = 16):
    return Request(request_id, prompt_len, 1, prefix_hashes=hashes, tokens_per_hash=per_hash)


def test_equal_hash_prefixes_are_equal_tokens_and_the_first_other_hash_differs_at_once():
    a = prompt_token_ids(hashed("a", 48, (1, 2, 3)))
    b = prompt_token_ids(hashed("b", 48, (1, 2, 4)))
    assert a[:32] == b[:32]
    assert a[32] != b[32]  # the block's first id spells its hash
    assert a[32 + KEY_IDS :] == b[32 + KEY_IDS :]


def test_a_short_last_block_is_the_first_tokens_of_its_hashs_block():
    whole = prompt_token_ids(hashed("a", 48, (1, 2, 3)))
    short = prompt_token_ids(hashed("b", 37, (1, 2, 3)))
    assert len(short) == 37 and short == whole[:37]


@pytest.mark.parametrize("hashes", [(), (5,)])
def test_tokens_past_the_hashes_are_the_requests_own(hashes):
    a = prompt_token_ids(hashed("a", 40, hashes))
    b = prompt_token_ids(hashed("b", 40, hashes))
    shared = 16 * len(hashes)
    assert len(a) == len(b) == 40
    assert a[:shared] == b[:shared] and a[shared] != b[shared]
    assert a == prompt_token_ids(hashed("a", 40, hashes))  # the same request, the same ids


def test_ids_lie_in_the_vocabulary_and_the_runs_spell_them_out():
    for request in [
        hashed("big", 70_000, (-(1 << 63), (1 << 64) - 1), per_hash=512),
        hashed("tiny", 3, (9,), per_hash=4),
        *mooncake_trace("conversation", limit=20),
    ]:
        ids = prompt_token_ids(request)
        assert len(ids) == request.prompt_len
        assert 1 <= min(ids) and max(ids) < VOCAB_SIZE
        runs = prompt_token_runs(request)
        assert ids == [t for first, n in runs for t in range(first, first + n)]
        assert all(first + n <= VOCAB_SIZE for first, n in runs)


def test_mooncake_conversations_share_exactly_their_equal_hash_blocks():
    requests = mooncake_trace("conversation", limit=200)
    first = {}
    for request in requests:
        ids = prompt_token_ids(request)
        for index, block_hash in enumerate(request.prefix_hashes[:-1]):
            block = tuple(ids[index * 512 : (index + 1) * 512])
            assert first.setdefault(block_hash, block) == block
    blocks = list(first.values())
    assert len(set(blocks)) == len(blocks)
