"""MemoryBudget: the KV quota as KvCacheCreator._cal_max_memory computes it (docs/REFERENCE.md §1)."""

import pytest

from kvlab import MemoryBudget

GIB = 2**30


def closed_form(total, peak, already, fraction, cap):
    available = max(0, int((total - peak + already) * fraction))
    return available if cap is None else min(available, cap)


def test_real_formula():
    b = MemoryBudget(
        total_bytes=80 * GIB,
        weights_bytes=50 * GIB,
        workspace_bytes=6 * GIB,
        activation_peak_bytes=3 * GIB,
        non_torch_bytes=1 * GIB,
        free_gpu_memory_fraction=0.9,
    )
    assert b.peak_memory_bytes == 60 * GIB
    assert b.available_bytes == int(20 * GIB * 0.9)
    assert b.kv_quota_bytes == int(20 * GIB * 0.9)


def test_already_allocated_kv_is_added_back():
    base = dict(total_bytes=80 * GIB, weights_bytes=40 * GIB, free_gpu_memory_fraction=0.5)
    b0 = MemoryBudget(**base)
    b1 = MemoryBudget(**base, already_allocated_kv_bytes=10 * GIB)
    assert b0.kv_quota_bytes == 20 * GIB
    assert b1.kv_quota_bytes == 25 * GIB  # (80 - 40 + 10) * 0.5


def test_default_fraction_is_0_9():
    b = MemoryBudget(total_bytes=1000)
    assert b.free_gpu_memory_fraction == 0.9
    assert b.kv_quota_bytes == 900


def test_max_gpu_total_bytes_caps_the_quota():
    b = MemoryBudget(total_bytes=80 * GIB, weights_bytes=10 * GIB, max_gpu_total_bytes=4 * 2**20)
    assert b.available_bytes > 4 * 2**20
    assert b.kv_quota_bytes == 4 * 2**20
    # a cap above what is available does not raise the quota
    loose = MemoryBudget(
        total_bytes=80 * GIB, weights_bytes=10 * GIB, max_gpu_total_bytes=200 * GIB
    )
    assert loose.kv_quota_bytes == loose.available_bytes == int(70 * GIB * 0.9)


def test_overcommitted_peak_gives_zero_not_negative():
    b = MemoryBudget(total_bytes=10 * GIB, weights_bytes=12 * GIB)
    assert b.available_bytes == 0
    assert b.kv_quota_bytes == 0


@pytest.mark.parametrize(
    "total, peak, already, fraction, cap",
    [
        (80 * GIB, 60 * GIB, 0, 0.9, None),
        (80 * GIB, 60 * GIB, 5 * GIB, 0.9, None),
        (24 * GIB, 23 * GIB, 0, 0.95, 2**22),
        (16 * GIB, 1 * GIB, 0, 1.0, None),
        (16 * GIB, 17 * GIB, 0, 0.5, None),
        (1000, 1, 3, 0.25, 100),
    ],
)
def test_table_against_closed_form(total, peak, already, fraction, cap):
    b = MemoryBudget(
        total_bytes=total,
        weights_bytes=peak,
        already_allocated_kv_bytes=already,
        free_gpu_memory_fraction=fraction,
        max_gpu_total_bytes=cap,
    )
    assert b.kv_quota_bytes == closed_form(total, peak, already, fraction, cap)


def test_bigger_workspace_shrinks_the_quota_monotonically():
    quotas = [
        MemoryBudget(
            total_bytes=80 * GIB, weights_bytes=40 * GIB, workspace_bytes=w * GIB
        ).kv_quota_bytes
        for w in range(0, 45, 3)
    ]
    assert all(a > b for a, b in zip(quotas, quotas[1:]) if a > 0), quotas
    assert all(a >= b for a, b in zip(quotas, quotas[1:])), quotas
    assert quotas[0] == int(40 * GIB * 0.9)
    assert quotas[-1] == 0  # 40 + 42 > 80


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(total_bytes=80 * GIB, weights_bytes=50 * GIB, workspace_bytes=6 * GIB),
        dict(
            total_bytes=80 * GIB,
            weights_bytes=50 * GIB,
            activation_peak_bytes=2 * GIB,
            non_torch_bytes=GIB,
            free_gpu_memory_fraction=0.95,
        ),
        dict(total_bytes=80 * GIB, weights_bytes=10 * GIB, max_gpu_total_bytes=4 * 2**20),
        dict(total_bytes=12345, workspace_bytes=345, free_gpu_memory_fraction=1.0),
    ],
)
def test_breakdown_sums_to_total_when_feasible(kwargs):
    b = MemoryBudget(**kwargs)
    parts = b.breakdown()
    assert set(parts) == {"weights", "workspace", "activations", "non-torch", "KV pool", "unused"}
    assert parts["KV pool"] == b.kv_quota_bytes
    assert all(v >= 0 for v in parts.values())
    assert sum(parts.values()) == b.total_bytes


@pytest.mark.parametrize(
    "mib, shown",
    [
        (2**-6, "0.01563"),
        (2**-7, "0.007813"),
        (2**1.5, "2.828"),
        (2**3.5, "11.31"),
        (4, "4"),
        (1024, "1,024"),
        (0, "0"),
    ],
)
def test_readout_mib_writes_what_the_slider_reads_out(mib, shown):
    """A tie rounds up, as the slider's readout does; Python's format would give 0.01562."""
    from kvlab.core.memory import readout_mib

    assert readout_mib(mib) == shown
