"""kvlab.analysis.reuse: the unbounded-cache ceiling of Mooncake's traces is what their README
states, hashes that are not prefix-chained are refused, the table sets a replay against the
ceiling, and a bad argument is named."""

from __future__ import annotations

import numpy as np
import pytest

from kvlab.analysis.reuse import replay_with_reuse, reuse_ceiling, reuse_table, shared_prefix_story
from kvlab.core.request import Request
from kvlab.run.workload import mooncake_trace


@pytest.mark.parametrize(
    "trace, blocks, distinct, ratio",
    [("conversation", 288_500, 182_790, 0.366), ("synthetic", 121_877, 43_924, 0.640)],
)
def test_the_mooncake_ceilings_are_the_readmes(trace, blocks, distinct, ratio):
    requests = mooncake_trace(trace)
    ceiling = reuse_ceiling(requests)
    assert ceiling.blocks == blocks and ceiling.blocks - ceiling.cached == distinct
    assert round(ceiling.hit_ratio, 3) == ratio
    # every prompt's hashes cover it in 512-token blocks, the last one possibly partial
    assert all(len(r.prefix_hashes) == -(-r.prompt_len // 512) for r in requests)


def test_a_shared_prefix_is_counted_once_and_a_broken_chain_refused():
    a = Request("a", 1024, 1, prefix_hashes=(1, 2))
    b = Request("b", 1536, 1, prefix_hashes=(1, 2, 3))
    c = Request("c", 1024, 1, prefix_hashes=(4, 5))
    ceiling = reuse_ceiling([a, b, c])
    assert (ceiling.blocks, ceiling.cached) == (7, 2)
    assert (ceiling.tokens, ceiling.cached_tokens) == (3584, 1024)
    again = reuse_ceiling([a, Request("a2", 1024, 1, prefix_hashes=(1, 2))])
    assert again.cached_tokens == 1023  # the last prompt token is always computed
    with pytest.raises(ValueError, match="not prefix-chained"):
        reuse_ceiling([a, Request("d", 1024, 1, prefix_hashes=(9, 2))])
    with pytest.raises(TypeError, match="prefix_hashes"):
        Request("e", 10, 1, prefix_hashes=[1, 2])


def _story_results():
    story = shared_prefix_story()
    return replay_with_reuse(story, policies=("capacity",), reuse=(True,)), reuse_ceiling(story)


def test_reuse_table_sets_each_run_against_the_ceiling():
    results, ceiling = _story_results()
    (row,) = reuse_table(results, ceiling)
    assert (row["policy"], row["block_reuse"]) == ("capacity", True)
    assert row["reused_share"] == row["reused_tokens"] / ceiling.tokens
    assert row["of_ceiling"] == row["reused_tokens"] / ceiling.cached_tokens


@pytest.mark.parametrize(
    "call, error, text",
    [
        (
            lambda: shared_prefix_story(engine=(i for i in range(3))),
            TypeError,
            "engine must be an EngineConfig",
        ),
        (
            lambda: shared_prefix_story(max_new_tokens=None),
            TypeError,
            "max_new_tokens must be an int",
        ),
        (
            lambda: reuse_table(np.zeros((2, 2)), _story_results()[1]),
            TypeError,
            "results must be a Mapping",
        ),
        (
            lambda: reuse_table(
                {"capacity": _story_results()[0][("capacity", True)]}, _story_results()[1]
            ),
            TypeError,
            "results must be keyed by (policy, reuse) pairs",
        ),
        (
            lambda: reuse_table(_story_results()[0], float("inf")),
            TypeError,
            "ceiling must be a ReuseCeiling",
        ),
    ],
)
def test_bad_arguments_name_the_parameter(call, error, text):
    with pytest.raises(error) as info:
        call()
    assert text in str(info.value)
