"""kvlab.analysis.presets: the one table of policies, the one vocabulary of outcomes, the one classifier;
everything that names a policy or an outcome reads them from there."""

import pytest

from kvlab import SglangScheduler, VllmScheduler, simulate
from kvlab.analysis.compare import EngineConfig, build_scheduler, long_and_small
from kvlab.analysis.phase import phase_diagram
from kvlab.analysis.presets import (
    ENGINE_OUTCOMES,
    OUTCOMES,
    RESIZE_OUTCOMES,
    engine_outcome,
    seed_geometry,
)
from kvlab.core.page_index import WIDTH_POLICIES
from kvlab.notebook import viz
from kvlab.sched.admission import ADMISSION_POLICIES
from kvlab.sched.policies import PEER_POLICIES, POLICIES, TRTLLM_POLICIES


def test_every_policy_names_a_real_admission_and_width_policy():
    assert set(TRTLLM_POLICIES) | set(PEER_POLICIES) == set(POLICIES)
    assert not set(TRTLLM_POLICIES) & set(PEER_POLICIES)
    for admission, width in POLICIES.values():
        assert (
            admission in ADMISSION_POLICIES or admission in PEER_POLICIES
        ) and width in WIDTH_POLICIES


@pytest.mark.parametrize("policy", list(POLICIES))
def test_each_policy_builds_the_engine_its_entry_names(policy):
    scheduler = build_scheduler(policy, EngineConfig())
    admission, width = POLICIES[policy]
    if admission in PEER_POLICIES:
        assert isinstance(scheduler, {"vllm": VllmScheduler, "sglang": SglangScheduler}[admission])
    else:
        assert scheduler.admission.name == admission
    assert scheduler.manager.page_index_policy == width
    assert (
        engine_outcome(simulate(scheduler, long_and_small(num_small=2), max_steps=5000))
        in ENGINE_OUTCOMES
    )


def test_one_vocabulary_of_outcomes():
    assert set(ENGINE_OUTCOMES) | set(RESIZE_OUTCOMES) == set(OUTCOMES)
    # the figures add only the two names of a stall nothing raised (viz.run_outcome)
    assert (
        set(viz.OUTCOME_COLORS)
        == set(viz.OUTCOME_LABELS)
        == set(OUTCOMES) | set(viz.UNRAISED_STALLS)
    )
    codes = phase_diagram([64], [8192])
    assert [ENGINE_OUTCOMES[codes[regime][0, 0]] for regime in TRTLLM_POLICIES] == [
        "crash",
        "stall",
        "reject",
    ]  # the seed's point, through the diagram's codes


def test_the_seed_geometry():
    geometry = seed_geometry()
    assert geometry.bytes_per_token == 2048 and geometry.blocks_in(4 << 20) == 64
    assert seed_geometry(16).tokens_per_block == 16
