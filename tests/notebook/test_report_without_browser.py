"""When Chromium cannot start, the walkthrough's report is written without images and says why,
instead of waiting for ever on kaleido's server (issue 28: ``BROWSER_PATH=/bin/false``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from bounds import HANG_S

SCRIPT = textwrap.dedent("""
    import time
    import nbformat
    from kvlab.notebook import walkthrough
    walkthrough.IMAGE_TIMEOUT_S = 5
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        walkthrough.PLOTLY_MIME: {"data": [{"type": "bar", "y": [1, 2]}], "layout": {}},
        "text/plain": "fig"})]
    nb.cells.append(cell)
    start = time.time()
    with walkthrough.image_server():
        first = walkthrough.with_static_figures(nb)
        second = walkthrough.with_static_figures(nb)
    print("SECONDS", time.time() - start)
    print("FAILURE", walkthrough.image_failure())
    print("HTML", first.cells[0].outputs[0]["data"]["text/html"])
    print("KINDS", sorted(second.cells[0].outputs[0]["data"]))
""")


def test_a_browser_that_cannot_start_leaves_a_report_without_images():
    env = {**os.environ, "BROWSER_PATH": "/bin/false"}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=HANG_S
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    assert float(lines["SECONDS"]) < 30  # one deadline, then no more waiting
    assert lines["FAILURE"].startswith(("TimeoutError", "the browser (Chromium) did not start"))
    assert "figure not rendered as an image" in lines["HTML"]
    assert lines["KINDS"] == "['text/html', 'text/plain']"
    assert "figures are not rendered as images" in proc.stderr
    assert "Traceback" not in proc.stderr  # the server thread's death is said in one line
