"""Closed-form phase verdicts: the seed's points, speed, and a random sample checked against
full simulate() runs."""

from __future__ import annotations

import time

import numpy as np
import pytest

from kvlab import KVGeometry, simulate
from kvlab.analysis.phase import PhaseSetup, phase_diagram, phase_scenario, phase_verdicts
from kvlab.analysis.presets import ENGINE_OUTCOMES, engine_outcome
from kvlab.sched.policies import TRTLLM_POLICIES

DEFAULT_SETUP = PhaseSetup()


def verdict(pool_blocks, context_len, regime, setup=DEFAULT_SETUP):
    return ENGINE_OUTCOMES[phase_verdicts([pool_blocks], [context_len], regime, setup)[0, 0]]


def test_the_seed_point():
    """4 MiB = 64 blocks, an 8192-token context: crash, stall, reject; 256 tokens: ok."""
    assert [verdict(64, 8192, regime) for regime in TRTLLM_POLICIES] == ["crash", "stall", "reject"]
    assert [verdict(64, 256, regime) for regime in TRTLLM_POLICIES] == ["ok", "ok", "ok"]


def test_growth_past_the_pool_stalls_and_past_the_row_crashes():
    grows = PhaseSetup(max_new_tokens=200)  # 2000 + 199 tokens: 69 blocks
    assert verdict(64, 2000, "none/clamped", grows) == "stall"  # pool 64 < row 68
    short_rows = PhaseSetup(max_seq_len=1024, max_new_tokens=200)
    assert verdict(100, 1000, "none/clamped", short_rows) == "crash"  # row 36 < pool 100
    assert verdict(100, 1000, "capacity", short_rows) == "reject"


def test_a_64_by_64_grid_for_three_policies_is_fast():
    pools = np.arange(1, 65) * 4
    contexts = np.geomspace(32, 16384, 64).astype(int)
    start = time.perf_counter()
    diagram = phase_diagram(pools, contexts)
    assert time.perf_counter() - start < 0.25
    assert set(diagram) == set(TRTLLM_POLICIES)
    assert all(grid.shape == (64, 64) for grid in diagram.values())


SETUPS = [
    PhaseSetup(),
    PhaseSetup(max_seq_len=1024, max_new_tokens=150, num_extra_kv_tokens=3),
    PhaseSetup(
        geometry=KVGeometry(1, 1, 8, tokens_per_block=16),
        max_seq_len=600,
        max_new_tokens=1,
        max_num_tokens=3000,
    ),
]


def sample_points(setup, seed, n=15):
    """Pools of 1..200 blocks, contexts up to 2.5 pools long: every verdict shows up."""
    rng = np.random.default_rng(seed)
    pools = rng.integers(1, 200, size=n)
    contexts = [
        int(rng.integers(1, 2.5 * pool * setup.geometry.tokens_per_block)) for pool in pools
    ]
    return list(zip(pools.tolist(), contexts))


@pytest.mark.parametrize("setup_index", range(len(SETUPS)))
@pytest.mark.parametrize("regime", list(TRTLLM_POLICIES))
def test_sampled_points_agree_with_full_simulations(regime, setup_index):
    setup = SETUPS[setup_index]
    for pool_blocks, context_len in sample_points(setup, seed=setup_index):
        expected = verdict(pool_blocks, context_len, regime, setup)
        scheduler, requests = phase_scenario(pool_blocks, context_len, regime, setup)
        result = simulate(scheduler, requests, max_steps=2000, check_invariants=True)
        assert engine_outcome(result) == expected, (pool_blocks, context_len, result.reasons)


def test_the_sample_covers_every_verdict():
    seen = {
        verdict(pool, context, regime, setup)
        for index, setup in enumerate(SETUPS)
        for regime in TRTLLM_POLICIES
        for pool, context in sample_points(setup, seed=index)
    }
    assert seen == set(ENGINE_OUTCOMES)


def test_bad_phase_arguments():
    with pytest.raises(ValueError, match="regime must be one of"):
        phase_verdicts([8], [8], "vllm")
    with pytest.raises(ValueError, match=r"pool_blocks\[0\] must be in \[1, "):
        phase_verdicts([0], [8], "capacity")
    with pytest.raises(ValueError, match=r"context_lens must hold ints in \[1, "):
        phase_verdicts([8], np.array([8, 0]), "capacity")
    with pytest.raises(TypeError, match=r"context_lens\[0\] must be an int"):
        phase_verdicts([8], ["8"], "capacity")
    with pytest.raises(ValueError, match="max_new_tokens must be in"):
        PhaseSetup(max_new_tokens=-1)


@pytest.mark.parametrize(
    "call, error, text",
    [
        (
            lambda: phase_scenario(64, 8192, "capacity", setup=-1),
            TypeError,
            "setup must be a PhaseSetup",
        ),
        (lambda: phase_diagram([8], [8], setup="x"), TypeError, "setup must be a PhaseSetup"),
        (
            lambda: phase_diagram([8], [8], regimes=2**63),
            TypeError,
            "regimes must be a sequence of regime names",
        ),
        (
            lambda: phase_diagram([8], [8], regimes="capacity"),
            TypeError,
            "regimes must be a sequence",
        ),
        (
            lambda: phase_diagram([8], [8], regimes=np.zeros((2, 2))),
            ValueError,
            "regimes[0] must be one of",
        ),
    ],
)
def test_bad_arguments_name_the_parameter(call, error, text):
    with pytest.raises(error) as info:
        call()
    assert text in str(info.value)


def test_phase_diagram_reads_an_iterator_once_for_every_regime():
    diagram = phase_diagram(iter([8, 64]), iter([256, 8192]))
    assert list(diagram) == list(TRTLLM_POLICIES)
    for regime in TRTLLM_POLICIES:
        assert diagram[regime].shape == (2, 2)
        assert np.array_equal(diagram[regime], phase_verdicts([8, 64], [256, 8192], regime))
