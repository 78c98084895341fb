"""Real JupyterLab in real Chromium: notebook 02's panel reacts to its sliders (marker ``ui``).

JupyterLab runs on 127.0.0.1 with a random token over a temporary copy of the notebooks;
playwright drives the system Chromium (never ``playwright install``), runs all cells through
``window.jupyterapp``, moves the pool-size and context-length sliders with the keyboard and
checks that the verdict and the figure change. A screenshot is kept under
build/test-artifacts/ when the test fails.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from lab_server import start_lab, stop_lab

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
NOTEBOOK = "02_single_gpu_repro_4mib.ipynb"
ARTIFACTS = REPO / "build" / "test-artifacts"

pytestmark = [pytest.mark.ui, pytest.mark.timeout(300)]


@pytest.fixture
def jupyter_lab(tmp_path):
    """A JupyterLab server over a copy of notebook 02; yields (base_url, token)."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: the ui test needs the system Chromium "
            "(scripts/setup.sh installs it with 'apt-get install chromium')"
        )
    root = tmp_path / "lab"
    root.mkdir()
    shutil.copy(REPO / "notebooks" / NOTEBOOK, root / NOTEBOOK)
    proc, base, token = start_lab(tmp_path, root)
    try:
        yield base, token
    finally:
        stop_lab(proc)


def _verdict(page) -> str:
    return page.locator(".jupyter-widgets .kvlab-verdict").first.inner_text()


def _figure_data(page) -> str:
    """The plotted data of the panel's first figure, as JSON (plotly keeps it on the DOM node)."""
    return page.evaluate("""() => {
        const plot = document.querySelector('.jupyter-widgets .js-plotly-plot');
        return plot ? JSON.stringify(plot.data.map(t => [t.x, t.y, t.z, t.text])) : null;
    }""")


def _move_slider(page, description: str, presses: int) -> None:
    slider = page.locator(
        ".widget-slider", has=page.locator(f"label:text-is('{description}')")
    ).first
    handle = slider.locator(".noUi-handle").first
    handle.focus()
    for _ in range(presses):
        handle.press("ArrowRight")


def _wait_change(page, read, before, timeout_s: float = 30):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = read(page)
        if now != before:
            return now
        time.sleep(0.2)
    raise AssertionError(f"nothing changed within {timeout_s} s (still {before!r:.200})")


def _wait_for(page, read, holds, timeout_s: float = 60):
    """What ``read(page)`` returns once ``holds`` is true of it."""
    deadline = time.monotonic() + timeout_s
    now = read(page)
    while not holds(now):
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout_s} s (last {now!r:.200})")
        time.sleep(0.2)
        now = read(page)
    return now


def test_notebook_02_panel_follows_its_sliders(jupyter_lab, request):
    try:  # imported here so that `pytest -m "not ui"` runs without the ui extra
        import playwright.sync_api as playwright_sync
    except ImportError:
        pytest.fail("the ui test needs playwright: pip install -e '.[ui]'")
    base, token = jupyter_lab
    with playwright_sync.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM),
            args=[
                "--no-sandbox",
                "--disable-dev-shm-usage",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
            ],
        )
        page = browser.new_page(viewport={"width": 1600, "height": 1200})
        try:
            page.goto(f"{base}/lab/tree/{NOTEBOOK}?token={token}")
            page.wait_for_function(
                "() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                " && window.jupyterapp.shell.currentWidget.sessionContext"
                " && window.jupyterapp.shell.currentWidget.sessionContext.session"
                " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel",
                timeout=90_000,
            )
            page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
            verdict = page.locator(".jupyter-widgets .kvlab-verdict").first
            verdict.wait_for(timeout=120_000)
            verdict.scroll_into_view_if_needed()
            first = _verdict(page)
            assert "ValueError" in first, first
            figure_before = _wait_change(page, _figure_data, None, timeout_s=90)  # rendered
            if figure_before == "[]":  # the element is there, its data not yet (a loaded machine)
                figure_before = _wait_change(page, _figure_data, "[]", timeout_s=90)

            # 4 MiB -> 32 MiB: three doublings at step 0.5 on a base-2 log slider
            # a loaded machine may show a move's intermediate values first: wait for the last
            _move_slider(page, "pool (MiB)", 6)
            second = _wait_for(page, _verdict, lambda v: "allocated" in v)
            figure_after_pool = _wait_change(page, _figure_data, figure_before)

            # a longer context than 32 MiB holds (16384 tokens) is refused again
            _move_slider(page, "context (tokens)", 6)  # six steps: 8,192 -> 65,536 tokens
            refused = _wait_for(page, _verdict, lambda v: v != second and "allocated" not in v)
            _wait_change(page, _figure_data, figure_after_pool)

            # issue 45: a context typed into the box beside the slider is taken (1,536 tokens
            # fit 32 MiB), where the slider's own readout took typing and ignored it
            box = (
                page.locator(".widget-hbox", has=page.locator("label:text-is('context (tokens)')"))
                .locator("input[type=text]")
                .first
            )
            # the box echoes the slider's moves: on a loaded machine the echo of its last
            # value can come after the verdict changed, and would overwrite what is typed
            _wait_for(page, lambda p: box.input_value(), lambda v: v == "65,536")
            refused = _wait_for(page, _verdict, lambda v: "65,536 tokens need" in v)
            box.fill("1536")
            box.press("Enter")
            typed = _wait_for(page, _verdict, lambda v: v != refused and "allocated" in v)
            assert "48 of 512 pages" in typed, typed  # 1,536 tokens: 48 pages of 32
        except BaseException:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
            raise
        finally:
            browser.close()
