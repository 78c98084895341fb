"""The seed's table, loaded from data/scenarios/, against kvlab's own arithmetic on real buffers."""

import pytest

from kvlab import KVGeometry
from kvlab.analysis.repro import run_repro
from kvlab.run.scenarios import load_scenario


@pytest.fixture(scope="module")
def seed():
    return load_scenario("rtx5080-4mib")


#: The scenario's own tier configuration (no tier below the GPU), and the real default (the
#: automatic host tier): the seed's figures hold under both, since the clamp counts GPU pages only.
TIERS = pytest.mark.parametrize(
    "host", ["scenario", None], ids=["scenario's tier (0)", "automatic"]
)


def _repro(seed, policy, host="scenario"):
    p = seed.parameters
    geometry = KVGeometry(p.num_layers, p.num_kv_heads, p.head_dim, p.kv_dtype, p.tokens_per_block)
    return run_repro(
        pool_mib=p.pool_mib,
        context=p.context_length,
        policy=policy,
        max_seq_len=p.configured_max_seq_len,
        geometry=geometry,
        host_cache_size=p.host_cache_size if host == "scenario" else host,
    )


def test_the_scenario_picks_no_tier_below_the_gpu(seed):
    assert seed.parameters.host_cache_size == 0


@TIERS
def test_every_reported_number_is_reproduced(seed, host):
    clamped, configured = _repro(seed, "clamped", host), _repro(seed, "configured", host)
    computed = {
        "bytes_per_token": clamped.bytes_per_token,
        "capacity_tokens": clamped.capacity_tokens,
        "total_blocks": clamped.total_blocks,
        "width_clamped": clamped.max_blocks_per_seq,
        "width_configured": configured.max_blocks_per_seq,
        "entries_needed": clamped.entries_needed,
    }
    assert computed == seed.expected


@TIERS
def test_the_seed_outcome_table(seed, host):
    """| 8192-token allocation | ValueError | Returns False |, state preserved, 32-token retry."""
    clamped, configured = _repro(seed, "clamped", host), _repro(seed, "configured", host)
    assert clamped.outcome == "crash"
    assert clamped.error == "User-provided base page indices is too short"
    assert configured.outcome == "refused"
    assert configured.state_preserved is True
    assert configured.retry_ok is True and configured.retry_tokens == 32
    assert configured.free_blocks_after == seed.expected["total_blocks"] - 1
