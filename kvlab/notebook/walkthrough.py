"""``kvlab walkthrough``: run the ``NN_*.ipynb`` notebooks headless with papermill into
``build/notebooks/``, export each to ``build/html/`` with its figures as PNG images (kaleido;
without them, saying why, when the browser fails) and summarise their findings. Outputs are
renamed into place once whole, an unfinished run is marked partial, the kernels' files live in
a private folder removed at the end, and SIGTERM and SIGHUP stop the run as Ctrl-C does."""

from __future__ import annotations

import base64
import copy
import html as html_text
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import warnings
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from kvlab.core.paths import NOTEBOOK_DIR
from kvlab.notebook.findings import read_findings
from kvlab.notebook.panel import PANEL_MIME
from kvlab.run.signals import signals_held, stopped_by_term_and_hup

#: A process that removes the kernels' folder once the walkthrough is gone (it ignores the
#: signals that stop the walkthrough, so it outlives it).
_REAPER = (
    "import os, shutil, signal, sys, time\n"
    "for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP): signal.signal(s, signal.SIG_IGN)\n"
    "folder, parent = sys.argv[1], int(sys.argv[2])\n"
    "while os.getppid() == parent: time.sleep(0.2)\n"
    "gone = 0\n"
    "for _ in range(50):  # the browser may still write as it goes: until gone twice\n"
    "    shutil.rmtree(folder, ignore_errors=True)\n"
    "    gone = gone + 1 if not os.path.exists(folder) else 0\n"
    "    if gone == 2: break\n"
    "    time.sleep(0.2)\n"
)
#: The longest Unix socket path kernels are given (``sun_path`` holds 104 to 108 bytes): past
#: it the kernel files go in /tmp instead of Jupyter's runtime folder.
MAX_SOCKET_PATH = 100
#: The folder :func:`private_files` gives the kernels (None outside it: the kernels' default).
_KERNEL_DIR: Path | None = None
#: The kernels' environment: progress bars off (an executed notebook keeps a bar half drawn).
KERNEL_ENV = {"TQDM_DISABLE": "1"}
#: Seconds a kernel may take to answer once started (papermill's default is 60: a busy 2-core
#: laptop, or a test run beside a parallel load, took longer, and the walk failed for nothing).
KERNEL_START_TIMEOUT_S = 300


@dataclass
class NotebookRun:
    """One executed notebook: where it went, how long it took, what it found or why it failed."""

    name: str
    seconds: float
    executed: Path
    html: Path | None
    findings: list[dict] = field(default_factory=list)
    error: str | None = None


def walkthrough_notebooks(notebook_dir: Path = NOTEBOOK_DIR) -> list[Path]:
    """The numbered notebooks of the walk, in order (files only: a folder named like one is not)."""
    return sorted(p for p in Path(notebook_dir).glob("[0-9][0-9]_*.ipynb") if p.is_file())


def _notebook_parameters(path: Path) -> dict:
    """The notebook's `parameters` cell: name -> papermill's description."""
    import papermill

    try:
        return papermill.inspect_notebook(str(path))
    # not JSON, not a notebook (a list where a dict goes), nested past the parser, unreadable
    except (ValueError, OSError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        why = _first_line(exc) or type(exc).__name__
        raise ValueError(f"{path.name} is not a notebook papermill can read: {why}") from None


def _first_line(exc: BaseException) -> str:
    """An exception's message, its first line, at most 200 characters."""
    return (str(exc).splitlines() or [""])[0][:200]


#: papermill's inferred parameter types -> the Python values a ``-p NAME=VALUE`` may give.
PARAMETER_TYPES = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,)}


def check_parameters(parameters: dict[str, object], notebooks: list[Path]) -> None:
    """Refuse a parameter none of ``notebooks`` has (ValueError) or of another type than its
    annotation (TypeError); each notebook checks its ranges in its first code cell."""
    accepted: dict[str, str] = {}
    for path in notebooks:
        for name, spec in _notebook_parameters(path).items():
            accepted.setdefault(name, spec["inferred_type_name"])
    for name, value in parameters.items():
        if name not in accepted:
            known = ", ".join(f"{n}: {t}" for n, t in sorted(accepted.items()))
            raise ValueError(
                f"parameter {name!r} is not a parameter of the selected notebooks "
                f"({', '.join(p.stem for p in notebooks)}); they accept {known}"
            )
        kind = accepted[name]
        types = PARAMETER_TYPES.get(kind)
        if types is None:
            continue  # an unannotated parameter: papermill passes anything
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise TypeError(
                f"parameter {name} must be {kind}, got {value!r} ({type(value).__name__})"
            )


@contextmanager
def stop_signals():
    """While inside, SIGTERM and SIGHUP stop the walkthrough as Ctrl-C does
    (kvlab.run.signals.stopped_by_term_and_hup), and the kernel tasks the stop fails are not
    reported."""
    logging.getLogger("asyncio").addFilter(
        lambda record: not record.getMessage().startswith("Task exception was never retrieved")
    )
    with stopped_by_term_and_hup():
        yield


@contextmanager
def private_files():
    """A private folder (mode 0700) for the kernels' connection files and sockets and this
    process's temporary files, removed on the way out, or by :data:`_REAPER` after a SIGKILL."""
    global _KERNEL_DIR
    from jupyter_core.paths import jupyter_runtime_dir

    parent = Path(jupyter_runtime_dir())
    if len(str(parent / "kvlab-12345678" / "k-123456789abc-ipc-5")) > MAX_SOCKET_PATH:
        parent = Path("/tmp") if Path("/tmp").is_dir() else Path(tempfile.gettempdir())
    try:
        parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        folder = Path(tempfile.mkdtemp(prefix="kvlab-", dir=parent))
    except OSError:  # an unusable runtime folder (JUPYTER_RUNTIME_DIR): the system's temporary one
        folder = Path(tempfile.mkdtemp(prefix="kvlab-"))
    reaper = subprocess.Popen(
        [sys.executable, "-c", _REAPER, str(folder), str(os.getpid())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _KERNEL_DIR, saved_tempdir, tempfile.tempdir = folder, tempfile.tempdir, str(folder)
    try:
        yield folder
    finally:
        _KERNEL_DIR, tempfile.tempdir = None, saved_tempdir
        shutil.rmtree(folder, ignore_errors=True)
        reaper.kill()
        reaper.wait()


def execute(path: Path, executed: Path, parameters: dict[str, object]) -> None:
    """Execute the notebook at ``path`` into ``executed`` with papermill in its own folder, its
    kernel on IPC sockets (ipykernel warns of unencrypted TCP) in :func:`private_files`' folder
    (a folder of its own outside the walkthrough's); a failing cell raises."""
    import papermill

    with private_files() if _KERNEL_DIR is None else nullcontext():
        papermill.execute_notebook(
            str(path),
            str(executed),
            parameters=parameters,
            kernel_name="python3",
            store_widget_state=False,
            progress_bar=False,
            cwd=str(Path(path).parent),
            kernel_manager_class=_ipc_kernel_manager(),
            start_timeout=KERNEL_START_TIMEOUT_S,
        )


def _ipc_kernel_manager():
    import uuid

    from jupyter_client.manager import AsyncKernelManager
    from traitlets import Unicode, default

    class IPCKernelManager(AsyncKernelManager):
        """Kernels on IPC sockets, their files in :func:`private_files`' folder, their own log
        dropped (a kernel stopped mid-cell logs a traceback there), :data:`KERNEL_ENV` set."""

        transport = Unicode("ipc")

        # AsyncKernelManager itself turns KernelManager's start_kernel into a coroutine
        async def start_kernel(self, **kw) -> None:  # type: ignore[override]
            kw.setdefault("stderr", subprocess.DEVNULL)
            kw["env"] = {**(kw.get("env") or os.environ), **KERNEL_ENV}
            await super().start_kernel(**kw)

        @default("connection_file")
        def _connection_file_default(self) -> str:
            # its sockets are named after it: without a folder of their own, jupyter_client
            # names them kernel-ipc-N in the notebook's folder, and two runs there at once
            # talk to each other's kernels ("Invalid Signature")
            assert _KERNEL_DIR is not None, "execute() gives every kernel a private folder"
            return str(_KERNEL_DIR / f"k-{uuid.uuid4().hex[:12]}.json")

    return IPCKernelManager


def run_notebook(path: Path, build_dir: Path, parameters: dict[str, object]) -> NotebookRun:
    """Execute one notebook and export it to HTML; a failure is the run's ``error``, not an
    exception, so the walkthrough goes on with the next notebook."""
    import nbformat
    import papermill
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from nbconvert import HTMLExporter

    executed = build_dir / "notebooks" / path.name
    html = build_dir / "html" / path.with_suffix(".html").name
    for folder in (executed.parent, html.parent):
        folder.mkdir(parents=True, exist_ok=True)
    accepted = _notebook_parameters(path)
    own = {k: v for k, v in parameters.items() if k in accepted}
    start = time.perf_counter()
    # written under a temporary name, renamed once whole: a stop leaves earlier outputs whole
    running = executed.with_name(f".{executed.stem}.running.ipynb")
    error, written, findings = None, None, []
    try:
        execute(path, running, own)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP: the earlier outputs stay as they were
        running.unlink(missing_ok=True)
        raise
    except papermill.PapermillExecutionError as exc:
        error = f"cell {exc.exec_count}: {exc.ename}: {exc.evalue}"
    except (DeadKernelError, CellTimeoutError) as exc:
        error = f"the kernel stopped: {type(exc).__name__}: {_first_line(exc)}"
    except (nbformat.reader.NotJSONError, nbformat.ValidationError, ValueError) as exc:
        error = f"not a notebook papermill can run: {_first_line(exc)}"
    except OSError as exc:
        error = f"cannot write {running}: {exc.strerror or exc}"
    seconds = time.perf_counter() - start
    try:
        if running.exists():
            if error is not None:
                mark_partial(running, error)
            os.replace(running, executed)
        if executed.is_file():
            notebook = nbformat.read(executed, as_version=4)
            findings = read_findings(notebook)
            body, _ = HTMLExporter().from_notebook_node(with_static_figures(notebook))
            writing = html.with_name(f".{html.name}.writing")
            writing.write_text(body, encoding="utf-8")
            os.replace(writing, html)
            written = html
    except OSError as exc:  # a full disk, a read-only folder, a folder where the file goes
        error = error or f"cannot write its output: {exc.filename}: {exc.strerror or exc}"
    except nbformat.ValidationError as exc:  # it ran, but nbconvert cannot export what it holds
        error = error or f"not a valid notebook, so no HTML: {_first_line(exc)}"
    return NotebookRun(path.stem, seconds, executed, written, findings, error)


def mark_partial(path: Path, error: str) -> None:
    """Mark the executed notebook at ``path`` partial: cells that never started "pending"
    again (papermill says "completed"), ``kvlab.partial`` in its metadata, a banner on top."""
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    not_run = 0
    for cell in notebook.cells:
        meta = cell.metadata.get("papermill")
        if cell.cell_type == "code" and meta is not None and meta.get("start_time") is None:
            meta["status"] = "pending"
            not_run += 1
    notebook.metadata["kvlab"] = {"partial": True, "error": error, "cells_not_run": not_run}
    banner = nbformat.v4.new_markdown_cell(
        f"**Partial run.** {html_text.escape(error)}. {not_run} code cell(s) after it did not "
        "run; what follows is what ran.",
        metadata={"tags": ["kvlab-partial"]},
    )
    notebook.cells.insert(0, banner)
    nbformat.write(notebook, path)


#: The widest line of :func:`summary_table`: a terminal's 100 columns.
SUMMARY_COLUMNS = 100


def summary_table(runs: list[NotebookRun], columns: int = SUMMARY_COLUMNS) -> str:
    """What each notebook found, in plain text no wider than ``columns``: per notebook its name,
    run time and status, then per finding its scenario, policy and outcome, and its numbers
    wrapped beneath."""
    lines = []
    for run in runs:
        status = f"FAILED: {run.error}" if run.error else f"{len(run.findings)} finding(s)"
        if not run.error and not run.findings:
            status = "no findings reported"
        lines += textwrap.wrap(
            f"{run.name}  {run.seconds:.1f} s  {status}", columns, subsequent_indent="    "
        )
        for f in run.findings:
            head = f"{f['scenario']} | {f['policy']} | {f['outcome']}"
            lines += textwrap.wrap(head, columns, initial_indent="  ", subsequent_indent="    ")
            lines += textwrap.wrap(
                str(f["numbers"]), columns, initial_indent="      ", subsequent_indent="      "
            )
    return "\n".join(lines)


PLOTLY_MIME = "application/vnd.plotly.v1+json"


#: Seconds one figure's image may take (kaleido waits for ever on a browser that failed).
IMAGE_TIMEOUT_S = 60.0
_image_failure: str | None = None  # why this process renders no more images


def image_failure() -> str | None:
    """Why figures stopped being rendered as images in this process (None: they were not)."""
    return _image_failure


def _with_deadline(call, seconds: float):
    """``call()`` in a daemon thread: its value or exception, TimeoutError after ``seconds``,
    RuntimeError at once when images failed meanwhile (the browser died)."""
    box = {}

    def run():
        try:
            box["value"] = call()
        except Exception as exc:  # handed to the caller
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True, name="kvlab-image")
    worker.start()
    deadline = time.monotonic() + seconds
    while worker.is_alive() and time.monotonic() < deadline and _image_failure is None:
        worker.join(0.2)
    if worker.is_alive():
        if _image_failure is not None:
            raise RuntimeError(_image_failure)
        raise TimeoutError(f"no image within {seconds:g} s: the browser (Chromium) did not answer")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _images_failed(why: str) -> None:
    """From now on no figure is rendered as an image in this process; say why, once."""
    global _image_failure
    if _image_failure is None:
        _image_failure = why[:300]
        print(
            f"walkthrough: figures are not rendered as images ({_image_failure}); the HTML "
            "report is written without them",
            file=sys.stderr,
            flush=True,
        )


@contextmanager
def image_server():
    """One kaleido browser (the system Chromium) for every figure of a run; one that cannot
    start is said in one line, not a traceback, and no figure waits for it."""
    import kaleido

    before = set(threading.enumerate())
    with signals_held():  # started or stopped half way, kaleido's exit hook fails
        kaleido.start_sync_server(silence_warnings=True)
    server = set(threading.enumerate()) - before
    previous = threading.excepthook

    def hook(args):
        if args.thread in server:
            text = str(args.exc_value).split("', '")[0].strip("('")
            _images_failed(
                f"the browser (Chromium) did not start: {args.exc_type.__name__}: {text}"
            )
        else:
            previous(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        try:
            with signals_held():
                _with_deadline(
                    lambda: kaleido.stop_sync_server(silence_warnings=True), IMAGE_TIMEOUT_S
                )
        except Exception:  # a browser that never started has nothing to stop
            pass
        finally:
            threading.excepthook = previous


def with_static_figures(notebook):
    """A copy of an executed notebook with plotly outputs as PNG images and live panels as
    their title, values, verdict and figures, for an offline HTML report."""
    warnings.filterwarnings("ignore", message="The kopts argument is ignored", category=UserWarning)
    static = copy.deepcopy(notebook)
    for cell in static.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            text = data.get("text/plain", "")
            if PANEL_MIME in data:  # a live panel: its title, values, verdict and every figure
                panel = data[PANEL_MIME]
                # the verdict's detail (aligned arithmetic) in the code font, not the report's
                verdict = panel["verdict"].replace(
                    '<pre style="', '<pre style="font-family:var(--jp-code-font-family, monospace);'
                )
                images = "".join(_image_html(_png(f)) for f in panel["figures"])
                html = panel["title"] + panel["values"] + verdict + images
                output["data"] = {"text/html": html, "text/plain": text}
            elif PLOTLY_MIME in data:
                png = _png(data[PLOTLY_MIME])
                shown = {"image/png": png} if png else {"text/html": _image_html(None)}
                output["data"] = {**shown, "text/plain": text}
    return static


def _image_html(png: str | None) -> str:
    """A figure's base64 PNG as an <img>, or why there is none."""
    if png is not None:
        return f'<img src="data:image/png;base64,{png}"/>'
    why = html_text.escape(_image_failure or "")
    return f"<p><em>figure not rendered as an image: {why}</em></p>"


def _png(figure) -> str | None:
    """A plotly figure (JSON text or a dict) as a base64 PNG; None once images have failed."""
    import plotly.io as pio

    if _image_failure is not None:
        return None
    text = figure if isinstance(figure, str) else json.dumps(figure)
    try:
        png = _with_deadline(
            lambda: pio.to_image(pio.from_json(text), format="png"), IMAGE_TIMEOUT_S
        )
    except Exception as exc:  # Chromium missing, dead or hung: the report goes on without images
        _images_failed(f"{type(exc).__name__}: {_first_line(exc)}")
        return None
    return base64.b64encode(png).decode()
