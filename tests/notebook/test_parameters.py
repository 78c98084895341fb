"""kvlab.notebook.parameters: each notebook's parameter check names the bad parameter, and
passes the notebook's own defaults."""

import pytest

from kvlab.notebook.parameters import (
    check_admission_parameters,
    check_mamba_parameters,
    check_repro_parameters,
)


def test_the_notebooks_defaults_pass():
    check_repro_parameters(4.0, 8192)
    check_admission_parameters()
    check_mamba_parameters()


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        (dict(pool_mib=0), ValueError, "pool_mib"),
        (dict(pool_mib=0.01), ValueError, "holds no page"),
        (dict(stall_limit=0), ValueError, "stall_limit"),
        (dict(grid=1), ValueError, "grid"),
        (dict(arrival_rate=0), ValueError, "arrival_rate"),
        (dict(SMOKE="yes"), TypeError, "SMOKE"),
        (dict(num_requests=1.5), TypeError, "num_requests"),
    ],
)
def test_admission_check_names_the_bad_one(kwargs, error, text):
    with pytest.raises(error, match=text):
        check_admission_parameters(**kwargs)


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        (dict(pool_mib=-1.0, context=8192), ValueError, r"pool_mib must be in \(0.0, 1048576\]"),
        (dict(pool_mib=4.0, context=0), ValueError, "context"),
        (dict(pool_mib=4.0, context=8192, policy="wide"), ValueError, "policy must be one of"),
        (dict(pool_mib=4.0, context=8192, tokens_per_block=True), TypeError, "tokens_per_block"),
        (dict(pool_mib=4.0, context=8192, SMOKE=1), TypeError, r"SMOKE must be a bool .* \(int\)"),
        (dict(pool_mib=4.0, context=8192, max_batch_size=0), ValueError, r"\[1, 1048576\]"),
    ],
)
def test_repro_check_names_the_bad_one(kwargs, error, text):
    with pytest.raises(error, match=text):
        check_repro_parameters(**kwargs)


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        (dict(quota_gib=0), ValueError, "quota_gib"),
        (
            dict(max_batch_size=(1 << 20) + 1),
            ValueError,
            r"max_batch_size must be in \[1, 1048576\]",
        ),
        (dict(ssm_dtype="int8"), ValueError, "ssm_dtype must be one of"),
        (dict(SMOKE="no"), TypeError, "SMOKE"),
    ],
)
def test_mamba_check_names_the_bad_one(kwargs, error, text):
    with pytest.raises(error, match=text):
        check_mamba_parameters(**kwargs)
