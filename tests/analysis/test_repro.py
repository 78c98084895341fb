"""kvlab.analysis.repro's page-index price: real tables measured, and a bad argument named."""

from __future__ import annotations

import pytest

from kvlab.analysis.repro import page_index_price
from kvlab.core.page_index import max_blocks_per_seq
from kvlab.core.table_size import table_nbytes


def test_page_index_price_measures_a_table_per_pair():
    rows = page_index_price(iter([2048, 8192]), (b for b in (1, 8)))
    assert [(r["max_seq_len"], r["max_batch_size"]) for r in rows] == [
        (2048, 1),
        (2048, 8),
        (8192, 1),
        (8192, 8),
    ]
    for row in rows:
        assert row["width"] == max_blocks_per_seq(row["max_seq_len"], 32)
        assert row["nbytes"] == table_nbytes(row["max_batch_size"], row["width"])


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        (dict(max_seq_lens=None), TypeError, "max_seq_lens must be a sequence of numbers"),
        (dict(max_seq_lens=""), TypeError, "max_seq_lens must be a sequence of numbers"),
        (dict(max_seq_lens=[0]), ValueError, "max_seq_lens[0] must be in [1, "),
        (dict(batch_sizes=True), TypeError, "batch_sizes must be a sequence of numbers"),
        (dict(batch_sizes=["x"]), TypeError, "batch_sizes[0] must be an int"),
    ],
)
def test_bad_arguments_name_the_parameter(kwargs, error, text):
    with pytest.raises(error) as info:
        page_index_price(**{"max_seq_lens": [8192], "batch_sizes": [1], **kwargs})
    assert text in str(info.value)
