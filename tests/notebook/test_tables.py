"""kvlab.notebook.tables: counts with thousands separators, reals to fixed decimals, text whole
and wrapped between words, in an HTML table."""

import math
import re

import pytest

from kvlab.notebook.tables import gib_pair, table


def test_counts_reals_and_long_text_as_a_reader_should_see_them():
    why = "the warm-up activation peak at max_num_tokens, which the report does not give " * 3
    html = table(
        [dict(field="memory", value=23622320128, fraction=0.123456, why=why)], index="field"
    ).to_html()
    assert "23,622,320,128" in html and "23622320128" not in html
    assert "0.12" in html and "0.123456" not in html
    assert (
        why.strip() in re.sub(r"<span[^>]*>|</span>", "", html) and "..." not in html
    )  # never clipped
    assert "word-break: normal" in html and "white-space: normal" in html  # wraps between words


def test_a_dataframe_keeps_its_index_and_integers_in_the_index_get_separators():
    import pandas as pd

    frame = pd.DataFrame({"pages": [29961, 64]}, index=pd.Index([958752, 2048], name="tokens"))
    html = table(frame).to_html()
    assert "958,752" in html and "29,961" in html and ">tokens<" in html


def test_every_text_column_is_left_aligned_whatever_its_dtype():
    """A column of str is pandas' string dtype since pandas 3, not object: still text."""
    import pandas as pd

    frame = pd.DataFrame({"value": [94, "bfloat16"], "why": ["a reason", "another reason"]})
    frame["why"] = frame["why"].astype("string")
    html = table(frame).to_html()
    for col in (0, 1):  # each cell of both columns is in the rule that aligns text left
        assert re.search(rf"_row1_col{col}\b[^{{]*\{{\s*text-align: left", html), col


def test_gib_pair_never_shows_unequal_sizes_as_equal():
    need, quota = round(37.4812 * 2**30), round(37.4809 * 2**30)
    assert gib_pair(need, quota) == ("37.4812", "37.4809")  # at 2 decimals both read 37.48
    assert gib_pair(10 * 2**30, 20 * 2**30) == ("10.00", "20.00")
    assert gib_pair(5 * 2**30, 5 * 2**30) == ("5.00", "5.00")


@pytest.mark.parametrize(
    "kwargs, named, error",
    [
        (dict(data=math.nan), "data", TypeError),
        (dict(data="x"), "data", TypeError),
        (dict(data=[[1, 2]]), r"data\[0\]", TypeError),
        (dict(index=True), "index", TypeError),
        (dict(index=[]), "index", TypeError),
        (dict(index={}), "index", TypeError),
        (dict(index="b"), "index", ValueError),
        (dict(digits="x"), "digits", TypeError),
        (dict(digits=-1), "digits", ValueError),
        (dict(digits=None), "digits", TypeError),
        (dict(digits={}), "digits", TypeError),
        (dict(digits=2**63), "digits", ValueError),
    ],
)
def test_a_bad_argument_is_refused_naming_it(kwargs, named, error):
    args = {"data": [{"a": 1}], **kwargs}
    with pytest.raises(error, match=rf"^{named} must"):
        table(**args)


def test_a_finding_holds_text_only():
    from kvlab.notebook.findings import Finding

    assert Finding("s", "p", "o", "n").numbers == "n"
    for field, bad in (("scenario", 0), ("numbers", []), ("policy", None), ("outcome", True)):
        fields = {**dict(scenario="s", policy="p", outcome="o", numbers="n"), field: bad}
        with pytest.raises(TypeError, match=f"^{field} must be a str"):
            Finding(**fields)


def test_a_long_column_name_may_wrap_at_its_underscores():
    """Learner pass B: 04's outcome tables ran past the notebook's width on their headers."""
    html = table([{"mean_queue_steps": 1, "a<b": 2}]).to_html()
    assert "mean_<wbr>queue_<wbr>steps" in html and "a&lt;b" in html


def test_a_flag_or_a_hyphenated_name_in_a_cell_stays_on_one_line():
    """Learner passes: 04 §5's peers table broke "--allow-auto-" over "truncate.", 06 §3's
    "mistral-" over "7b-v0.1" (in the index)."""
    html = table(
        [
            {
                "model": "mistral-7b-v0.1",
                "reasons": "Use a shorter input or enable --allow-auto-truncate.",
            }
        ],
        index="model",
    ).to_html()
    assert '<span style="white-space:nowrap">--allow-auto-truncate.</span>' in html
    assert '<span style="white-space:nowrap">mistral-7b-v0.1</span>' in html
    long_name = "x" * 50 + "-y"  # longer than a column: it may still break
    assert "nowrap" not in table([{"name": long_name}]).to_html()


def test_a_word_longer_than_a_column_wraps_at_its_dots_and_underscores():
    """Verification pass X2: 04 §7's error column ran past the notebook on
    "kv_cache_config.host_cache_size"."""
    html = table(
        [{"error": "Configure kv_cache_config.host_cache_size, or lower max_batch_size."}]
    ).to_html()
    assert (
        "kv_<wbr>cache_<wbr>config.<wbr>host_<wbr>cache_<wbr>size" in html
        and "max_batch_size" in html
    )
