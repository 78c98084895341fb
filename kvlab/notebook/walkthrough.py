"""The main job: execute the walkthrough notebooks headless and summarise their findings.

Each notebook under notebooks/ named ``NN_*.ipynb`` runs with papermill in a fresh kernel
(parameters overridable), the executed copy goes to ``build/notebooks/`` and a static HTML copy
to ``build/html/``: plotly figures there are PNG images rendered by kaleido with the system
Chromium, so the report reads anywhere, offline. When Chromium cannot start, or an image does
not come within ``IMAGE_TIMEOUT_S``, the rest of the report is written without images, each
figure replaced by a line saying why (:func:`image_failure`). The findings each notebook
reported (kvlab.notebook.findings) are collected for the summary.
"""

from __future__ import annotations

import base64
import copy
import html as html_text
import os
import sys
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from kvlab.core.paths import NOTEBOOK_DIR
from kvlab.notebook.findings import read_findings
from kvlab.notebook.panel import PANEL_MIME



@dataclass
class NotebookRun:
    """One executed notebook: where it went, how long it took, what it found or why it failed."""

    name: str
    seconds: float
    executed: Path
    html: Optional[Path]
    findings: List[dict] = field(default_factory=list)
    error: Optional[str] = None


def walkthrough_notebooks(notebook_dir: Path = NOTEBOOK_DIR) -> List[Path]:
    """The numbered notebooks of the walk, in order (files only: a folder named like one is not)."""
    return sorted(p for p in Path(notebook_dir).glob("[0-9][0-9]_*.ipynb") if p.is_file())


def _notebook_parameters(path: Path) -> dict:
    """The notebook's `parameters` cell: name -> papermill's description (inferred_type_name,
    default, help)."""
    import papermill

    try:
        return papermill.inspect_notebook(str(path))
    except (ValueError, OSError, KeyError) as exc:  # not JSON, not a notebook, unreadable
        raise ValueError(f"{path.name} is not a notebook papermill can read: "
                         f"{str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}") from None


#: papermill's inferred parameter types -> the Python values a ``-p NAME=VALUE`` may give.
PARAMETER_TYPES = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,)}


def check_parameters(parameters: Dict[str, object], notebooks: List[Path]) -> None:
    """Refuse a parameter that none of ``notebooks`` has (ValueError listing the ones they
    have) or whose value's type differs from the notebook's annotation (TypeError). Ranges are
    the notebooks' own: each checks its parameters in its first code cell."""
    accepted: Dict[str, str] = {}
    for path in notebooks:
        for name, spec in _notebook_parameters(path).items():
            accepted.setdefault(name, spec["inferred_type_name"])
    for name, value in parameters.items():
        if name not in accepted:
            known = ", ".join(f"{n}: {t}" for n, t in sorted(accepted.items()))
            raise ValueError(f"parameter {name!r} is not a parameter of the selected notebooks "
                             f"({', '.join(p.stem for p in notebooks)}); they accept {known}")
        kind = accepted[name]
        types = PARAMETER_TYPES.get(kind)
        if types is None:
            continue  # an unannotated parameter: papermill passes anything
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise TypeError(f"parameter {name} must be {kind}, got {value!r} "
                            f"({type(value).__name__})")


def execute(path: Path, executed: Path, parameters: Dict[str, object]) -> None:
    """Execute the notebook at ``path`` into ``executed`` with papermill, in its own folder, its
    kernel reached over IPC sockets (over TCP, ipykernel warns once per notebook that the
    traffic is not encrypted). A failing cell raises papermill's PapermillExecutionError."""
    import papermill

    papermill.execute_notebook(str(path), str(executed), parameters=parameters,
                               kernel_name="python3", store_widget_state=False, progress_bar=False,
                               cwd=str(Path(path).parent), kernel_manager_class=_ipc_kernel_manager())


def _ipc_kernel_manager():
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import Unicode

    class IPCKernelManager(AsyncKernelManager):
        """A kernel manager whose kernels listen on IPC sockets (files in Jupyter's runtime
        folder, removed at shutdown), not on TCP ports."""

        transport = Unicode("ipc")

    return IPCKernelManager


def run_notebook(path: Path, build_dir: Path, parameters: Dict[str, object]) -> NotebookRun:
    """Execute one notebook with papermill and export it to HTML. A failing cell, a kernel that
    dies, a file that is not a notebook or an output that cannot be written is the run's
    ``error``, not an exception: the walkthrough goes on with the next notebook."""
    import nbformat
    import papermill
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from nbconvert import HTMLExporter

    executed = build_dir / "notebooks" / path.name
    html = build_dir / "html" / path.with_suffix(".html").name
    executed.parent.mkdir(parents=True, exist_ok=True)
    html.parent.mkdir(parents=True, exist_ok=True)
    accepted = _notebook_parameters(path)
    own = {k: v for k, v in parameters.items() if k in accepted}
    start = time.perf_counter()
    error = None
    # Each output is written under a temporary name and renamed once whole: a run stopped half
    # way (a signal, a full disk) leaves the earlier notebook and HTML as they were, side by side.
    running = executed.with_name(f".{executed.stem}.running.ipynb")
    notebook, written = None, None
    try:
        execute(path, running, own)
    except papermill.PapermillExecutionError as exc:
        error = f"cell {exc.exec_count}: {exc.ename}: {exc.evalue}"
    except (DeadKernelError, CellTimeoutError) as exc:
        error = f"the kernel stopped: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    except (nbformat.reader.NotJSONError, nbformat.ValidationError, ValueError) as exc:
        error = f"not a notebook papermill can run: {str(exc).splitlines()[0][:200]}"
    except OSError as exc:
        error = f"cannot write {running}: {exc.strerror or exc}"
    seconds = time.perf_counter() - start
    try:
        if running.exists():
            os.replace(running, executed)
        notebook = nbformat.read(executed, as_version=4) if executed.is_file() else None
        if notebook is not None:
            body, _ = HTMLExporter().from_notebook_node(with_static_figures(notebook))
            writing = html.with_name(f".{html.name}.writing")
            writing.write_text(body, encoding="utf-8")
            os.replace(writing, html)
            written = html
    except OSError as exc:  # a full disk, a read-only folder, a folder where the file goes
        error = error or f"cannot write its output: {exc.filename}: {exc.strerror or exc}"
    return NotebookRun(path.stem, seconds, executed, written,
                       read_findings(notebook) if notebook is not None else [], error)


def summary_table(runs: List[NotebookRun]) -> str:
    """A plain-text table: one line per finding, with each notebook's status and run time."""
    cols = ("scenario", "policy", "outcome")
    width = {c: max([len(c)] + [len(str(f[c])) for r in runs for f in r.findings]) for c in cols}
    name_w = max([len("notebook")] + [len(r.name) for r in runs])
    lines = [f"{'notebook':{name_w}} {'time':>7}  "
             + " ".join(f"{c:{width[c]}}" for c in cols) + " numbers"]
    for run in runs:
        head = f"{run.name:{name_w}} {run.seconds:6.1f}s"
        if run.error:
            lines.append(f"{head}  FAILED: {run.error}")
            continue
        if not run.findings:
            lines.append(f"{head}  (no findings reported)")
        for i, f in enumerate(run.findings):
            lead = head if i == 0 else " " * len(head)
            lines.append(f"{lead}  " + " ".join(f"{str(f[c]):{width[c]}}" for c in cols)
                         + f" {f['numbers']}")
    return "\n".join(lines)


PLOTLY_MIME = "application/vnd.plotly.v1+json"


#: Seconds one figure's image may take (kaleido waits for ever on a browser that failed).
IMAGE_TIMEOUT_S = 60.0
_image_failure: Optional[str] = None  # why this process renders no more images


def image_failure() -> Optional[str]:
    """Why figures stopped being rendered as images in this process (None: they were not)."""
    return _image_failure


def _with_deadline(call, seconds: float):
    """``call()`` in a daemon thread: its value, its exception, or TimeoutError after
    ``seconds`` (the thread is left behind; it does not keep the process alive)."""
    box = {}

    def run():
        try:
            box["value"] = call()
        except Exception as exc:  # handed to the caller
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True, name="kvlab-image")
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise TimeoutError(f"no image within {seconds:g} s: the browser (Chromium) did not answer")
    if "error" in box:
        raise box["error"]
    return box.get("value")


@contextmanager
def image_server():
    """Keep one kaleido browser (the system Chromium) for every figure of a run."""
    import kaleido

    kaleido.start_sync_server(silence_warnings=True)
    try:
        yield
    finally:
        try:
            _with_deadline(lambda: kaleido.stop_sync_server(silence_warnings=True), IMAGE_TIMEOUT_S)
        except Exception:  # a browser that never started has nothing to stop
            pass


def with_static_figures(notebook):
    """A copy of an executed notebook whose plotly outputs are PNG images, and whose live
    panels show their title, values, verdict and every figure, for an offline HTML report."""
    warnings.filterwarnings("ignore", message="The kopts argument is ignored", category=UserWarning)
    static = copy.deepcopy(notebook)
    for cell in static.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            text = data.get("text/plain", "")
            if PANEL_MIME in data:  # a live panel: its title, values, verdict and every figure
                panel = data[PANEL_MIME]
                images = "".join(_img(f) for f in panel["figures"])
                output["data"] = {"text/html": panel["title"] + panel["values"]
                                  + _monospace_detail(panel["verdict"]) + images, "text/plain": text}
            elif PLOTLY_MIME in data:
                png = _png(data[PLOTLY_MIME])
                output["data"] = ({"image/png": png, "text/plain": text} if png is not None else
                                  {"text/html": _no_image(), "text/plain": text})
    return static


def _img(figure) -> str:
    png = _png(figure)
    return f'<img src="data:image/png;base64,{png}"/>' if png is not None else _no_image()


def _no_image() -> str:
    return f"<p><em>figure not rendered as an image: {html_text.escape(_image_failure or '')}</em></p>"


def _monospace_detail(verdict: str) -> str:
    """The verdict with its detail (a <pre> of arithmetic, aligned in columns) in the code font:
    the report's stylesheet gives every <pre> of an output the text font."""
    return verdict.replace('<pre style="', '<pre style="font-family:var(--jp-code-font-family, monospace);')


def _png(figure) -> Optional[str]:
    """A plotly figure (JSON text or a dict) as a base64 PNG; None once images have failed."""
    global _image_failure
    import plotly.io as pio

    if _image_failure is not None:
        return None
    try:
        png = _with_deadline(lambda: pio.to_image(pio.from_json(_as_json(figure)), format="png"),
                             IMAGE_TIMEOUT_S)
    except Exception as exc:  # Chromium missing, dead or hung: the report goes on without images
        _image_failure = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
        print(f"walkthrough: figures are not rendered as images ({_image_failure}); the HTML "
              "report is written without them", file=sys.stderr, flush=True)
        return None
    return base64.b64encode(png).decode()


def _as_json(figure) -> str:
    import json

    return figure if isinstance(figure, str) else json.dumps(figure)
