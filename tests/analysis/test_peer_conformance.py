"""kvlab.analysis.peer_conformance: the comparison of two runs and the workloads by name, and a
bad argument named."""

from __future__ import annotations

import numpy as np
import pytest

from kvlab.analysis.compare import long_and_small
from kvlab.analysis.peer_conformance import (
    COMPARED,
    NOTEBOOK_04,
    PeerWorkload,
    by_name,
    differences,
)


def _run(num_small: int):
    return PeerWorkload(
        f"small-{num_small}", NOTEBOOK_04, long_and_small(num_small=num_small)
    ).run_peer()


def test_differences_lists_what_two_runs_disagree_on():
    one, two = _run(1), _run(2)
    assert differences(one, _run(1)) == []
    assert [(row["request_id"], row["field"], row["kvlab"]) for row in differences(one, two)] == [
        ("s1", field, None) for field in COMPARED
    ]  # the peer's run lacks s1
    assert differences(two, one) == [
        dict(request_id="s1", field="status", real=None, kvlab=two.status["s1"])
    ]


def test_by_name_keys_the_workloads_by_their_names():
    workloads = [
        PeerWorkload(name, NOTEBOOK_04, long_and_small(num_small=0)) for name in ("a", "b")
    ]
    assert by_name(workloads) == {"a": workloads[0], "b": workloads[1]}
    assert by_name(iter(workloads)) == by_name(workloads)


@pytest.mark.parametrize(
    "call, error, text",
    [
        (
            lambda: differences((i for i in range(3)), _run(0)),
            TypeError,
            "peer must be a SimulationResult",
        ),
        (
            lambda: differences(_run(0), (i for i in range(3))),
            TypeError,
            "real must be a SimulationResult",
        ),
        (lambda: by_name(-1), TypeError, "workloads must be a sequence of PeerWorkloads"),
        (lambda: by_name(""), TypeError, "workloads must be a sequence of PeerWorkloads"),
        (lambda: by_name(np.zeros((2, 2))), TypeError, "workloads[0] must be a PeerWorkload"),
    ],
)
def test_bad_arguments_name_the_parameter(call, error, text):
    with pytest.raises(error) as info:
        call()
    assert text in str(info.value)
