"""Notebook 04 §8b's caching panel and figures, headless: the controls switch the engine, caching,
pool and slice, the figure and the verdict follow and say which defaults were on; drags are
coalesced inside an event loop; without a frontend the panel carries a static copy."""

from __future__ import annotations

import asyncio

import pytest

from kvlab.analysis.shipped import SLICE_POOL_PAGES, caching_rows, shared_prefix_runs
from kvlab.notebook import viz
from kvlab.notebook.panel import PANEL_MIME
from kvlab.notebook.widgets import CACHING_PANEL_POOLS, caching_panel


@pytest.fixture(scope="module")
def panel():
    return caching_panel()  # vLLM, caching on, the tight pool, 12 conversations


def title(panel) -> str:
    return panel.figures["requests"].layout.title.text


def test_the_default_says_vllms_defaults_and_what_caching_did(panel):
    assert panel.outcome == "reject"  # the tight pool: two prompts longer than it
    text = panel.verdict_text
    assert text.startswith("vLLM 0.34.0: prefix caching on, async scheduling on. 42 finished")
    assert 'left 2 requests "never"' in text
    assert "vLLM 0.34.0: prefix caching on, async scheduling on" in title(panel)
    names = [t.name for t in panel.figures["requests"].data]
    assert names[:3] == [
        "prompt tokens found cached",
        "prompt tokens computed",
        "rejected (longer than the pool)",
    ]
    cached = panel.figures["requests"].data[0].y
    assert sum(cached) == panel.model.rows[True]["reused_tokens"] > 0


def test_the_controls_switch_caching_engine_and_pool(panel):
    before = [t.name for t in panel.figures["requests"].data]
    try:
        panel.set(caching=False)
        assert "prefix caching off" in title(panel)
        assert sum(panel.figures["requests"].data[0].y) == 0  # nothing found cached
        assert panel.verdict_text.startswith("vLLM 0.34.0: prefix caching off")
        panel.set(engine="SGLang", caching=True)
        label = "SGLang 0.5.23: radix cache on, overlap schedule"
        assert label in title(panel) and panel.verdict_text.startswith(label)
        panel.set(engine="TensorRT-LLM", pages=SLICE_POOL_PAGES["roomy"])
        assert panel.outcome == "ok" and 'left 0 requests "never"' in panel.verdict_text
        assert "TensorRT-LLM: block reuse on" in title(panel)
        # the same traces whatever the values, so the browser redraws the figure in place
        assert [t.name for t in panel.figures["requests"].data][:3] == before[:3]
        assert len(panel.figures["requests"].data) == len(before)
    finally:
        panel.set(engine="vLLM", caching=True, pages=SLICE_POOL_PAGES["tight"])


def test_a_burst_of_changes_is_coalesced_inside_an_event_loop():
    async def burst():
        p = caching_panel(wait_s=0.05)
        start = p.updates
        for pages in CACHING_PANEL_POOLS:
            p.controls["pages"].value = pages
        p.controls["caching"].value = False
        assert p.updates == start + 1  # the first change ran; the rest wait for the window
        await asyncio.sleep(0.2)
        assert p.updates == start + 2 and not p.debouncer.pending
        assert p.model.pages == CACHING_PANEL_POOLS[-1] and not p.model.run.caching

    asyncio.run(burst())


def test_without_a_frontend_the_panel_is_a_static_copy(panel):
    bundle = panel._repr_mimebundle_()
    assert PANEL_MIME in bundle and len(bundle[PANEL_MIME]["figures"]) == 1
    assert "kvlab-verdict" in bundle["text/html"]


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="engine must be one of"):
        caching_panel(engine="TGI")
    with pytest.raises(ValueError, match="pages must be one of"):
        caching_panel(pages=1234)
    with pytest.raises(ValueError, match="conversations must be one of"):
        caching_panel(conversations=True)  # type: ignore[arg-type]


def test_the_bars_name_every_engines_defaults_and_draw_the_rows():
    runs = shared_prefix_runs()
    rows = caching_rows(runs)
    fig = viz.caching_bars_figure(rows)
    subtitle = fig.layout.title.text
    for row in rows:
        if row["caching"]:
            assert row["defaults"].split(": ")[0] in subtitle
    assert "radix cache on" in subtitle and "prefix caching on" in subtitle
    waited = [t for t in fig.data if t.xaxis == "x3"]
    assert [t.name for t in waited] == ["caching on (as shipped)", "caching off"]
    on = {r["engine"]: r["waited"] for r in rows if r["caching"]}
    assert list(waited[0].y) == [on[e] for e in waited[0].x]
