"""The real vLLM v1 scheduler as a backend: a kvlab workload run by vLLM 0.34.0 itself.

vLLM pins its own torch, so it lives in an environment of its own, made once by
``bash scripts/setup.sh vllm`` in a cache folder (``$KVLAB_VLLM_ENV``, else
``$XDG_CACHE_HOME/kvlab/vllm-0.34.0``, else ``~/.cache/kvlab/vllm-0.34.0``). :func:`run_workloads`
starts its Python on ``vllm_driver.py`` (beside this file; it imports vLLM, never kvlab), sends
the workloads as JSON and reads back JSON lines as they happen: per request its start, first
token, preemptions, rejection or finish, and per step the free blocks, running and waiting
requests, tokens scheduled and preemptions. Each workload comes back as what ``kvlab.simulate``
returns, a :class:`~kvlab.run.simulation.SimulationResult`, so tables and figures take either.

Nothing is lost: a request vLLM rejects at its front door is "rejected" with vLLM's own message;
when vLLM refuses to start, every request is rejected with that message and ``result.error`` is
a ValueError; when the vLLM process dies or hangs past ``timeout_s``, ``result.error`` is a
:class:`VllmBackendError` with the end of its stderr, and each request keeps the status the
events gave it ("waiting" or "running" if it had not ended), with a reason that says so. Without
the environment, :class:`VllmUnavailable` names the setup command.

:func:`record` stores real runs in data/measurements/ (vLLM's version, the command, the driver's
lines); :func:`stored_results` rebuilds them, so a notebook shows real vLLM's answers without
the environment. Both rebuild results through the same reader.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from kvlab.analysis.vllm_conformance import VllmWorkload, workloads_by_name
from kvlab.core.checks import check_float
from kvlab.core.geometry import KVGeometry
from kvlab.core.paths import DATA_DIR
from kvlab.core.request import Request
from kvlab.run.simulation import SimulationResult, finished_reason, refused_to_start
from kvlab.run.trace import EVENT_KINDS, Event, StepRecord, Trace
from kvlab.sched.vllm import VLLM_VERSION, VllmEngineArgs

SETUP_COMMAND = "bash scripts/setup.sh vllm"
DRIVER = Path(__file__).with_name("vllm_driver.py")
STORED = DATA_DIR / "measurements" / f"vllm-{VLLM_VERSION}.json"
#: KV dtypes the driver gives vLLM (torch dtypes of vLLM's FullAttentionSpec).
DRIVER_DTYPES = ("float32", "float16", "bfloat16", "fp8")
#: Lines of the vLLM process's stderr kept in a VllmBackendError.
STDERR_TAIL = 20


class VllmUnavailable(RuntimeError):
    """vLLM's environment is not set up on this machine."""


class VllmBackendError(RuntimeError):
    """The vLLM process died, hung or wrote something that is not the driver's protocol."""


def environment_dir() -> Path:
    """Where ``bash scripts/setup.sh vllm`` makes vLLM's environment."""
    if os.environ.get("KVLAB_VLLM_ENV"):
        return Path(os.environ["KVLAB_VLLM_ENV"])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "kvlab" / f"vllm-{VLLM_VERSION}"


def vllm_python() -> Path:
    """The environment's Python; VllmUnavailable, naming the setup command, when it is not
    ready."""
    env = environment_dir()
    python = env / "bin" / "python"
    if not (env / "kvlab-ready").is_file() or not python.is_file():
        raise VllmUnavailable(f"vLLM {VLLM_VERSION}'s environment is not set up at {env}: run "
                              f"`{SETUP_COMMAND}` once (about 7 GB and a few minutes; it is "
                              "cached after that)")
    return python


def is_available() -> bool:
    try:
        vllm_python()
    except VllmUnavailable:
        return False
    return True


def driver_input(workload: VllmWorkload) -> dict:
    """One workload as the driver reads it; ValueError for what the driver cannot give vLLM."""
    geometry = workload.args.geometry
    if geometry.kv_factor != 2 or geometry.dtype not in DRIVER_DTYPES:
        raise ValueError(f"workload {workload.name!r}: the vLLM backend runs K-and-V attention "
                         f"caches of {list(DRIVER_DTYPES)} (kv_factor 2), got kv_factor="
                         f"{geometry.kv_factor}, dtype={geometry.dtype!r}")
    args = workload.args
    engine = dict(num_layers=geometry.num_layers, num_kv_heads=geometry.kv_heads_per_rank,
                  head_dim=geometry.head_dim, dtype=geometry.dtype, block_size=args.block_size,
                  num_gpu_blocks=args.num_gpu_blocks,
                  startup_num_gpu_blocks=args.startup_blocks,
                  max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs,
                  max_num_batched_tokens=args.max_num_batched_tokens,
                  enable_chunked_prefill=args.enable_chunked_prefill, enable_prefix_caching=False,
                  scheduler_reserve_full_isl=args.scheduler_reserve_full_isl,
                  watermark=args.watermark)
    requests = [[r.request_id, r.prompt_len, r.max_new_tokens, r.arrival_step]
                for r in workload.requests]
    return dict(name=workload.name, engine=engine, requests=requests, max_steps=workload.max_steps)


def run(args: VllmEngineArgs, requests: Iterable[Request], max_steps: int = 100_000,
        timeout_s: Optional[float] = None) -> SimulationResult:
    """The real vLLM scheduler on one workload (module docstring)."""
    return run_workloads([VllmWorkload("run", args, tuple(requests), max_steps)], timeout_s)[0]


def run_workloads(workloads: Sequence[VllmWorkload],
                  timeout_s: Optional[float] = None) -> List[SimulationResult]:
    """The real vLLM scheduler on each workload, all in one vLLM process (its start-up takes
    seconds); ``timeout_s`` bounds the whole process (None: no bound)."""
    return [record.result() for record in _run(workloads, timeout_s)]


def _run(workloads: Sequence[VllmWorkload], timeout_s: Optional[float]) -> List["RunRecord"]:
    workloads = list(workloads)
    if not all(isinstance(w, VllmWorkload) for w in workloads):
        raise TypeError("workloads must hold VllmWorkload objects")
    if timeout_s is not None:
        timeout_s = check_float("timeout_s", timeout_s, low=0.0, high=86_400.0, low_open=True)
    document = json.dumps({"runs": [driver_input(w) for w in workloads]})
    output = _DriverOutput(workloads)
    failure = _communicate(vllm_python(), document, timeout_s, output)
    return output.records_after(failure)


def _communicate(python: Path, document: str, timeout_s: Optional[float],
                 output: "_DriverOutput") -> Optional[VllmBackendError]:
    """Run the driver, handing ``output`` its lines as they come; None, or the VllmBackendError
    that ended it (a timeout, a death, a line off the protocol: then it is killed)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_LOGGING_LEVEL="ERROR",
               VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as stderr:
        process = subprocess.Popen([str(python), "-I", str(DRIVER)], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=stderr, env=env, text=True,
                                   encoding="utf-8", start_new_session=True)
        timed_out = threading.Event()

        def kill():  # its whole process group: a child holding its stdout would keep us reading
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        def on_timeout():
            timed_out.set()
            kill()

        timer = threading.Timer(timeout_s, on_timeout) if timeout_s is not None else None
        try:
            if timer is not None:
                timer.start()
            threading.Thread(target=_feed, args=(process, document), daemon=True).start()
            for line in process.stdout:
                if not output.feed(line):
                    kill()
                    break
            returncode = process.wait()
        finally:
            if timer is not None:
                timer.cancel()
            kill()  # nothing of it outlives the call, interrupted or not
            process.wait()
            process.stdout.close()
        stderr.seek(0)
        tail = "".join(stderr.readlines()[-STDERR_TAIL:]).strip()
    if output.failure is not None:
        return output.failure
    if timed_out.is_set():
        return VllmBackendError(f"the vLLM process ran past timeout_s={timeout_s:g} s and was "
                                f"killed; its stderr ended: {tail}")
    if returncode != 0:
        how = f"signal {-returncode}" if returncode < 0 else f"exit code {returncode}"
        return VllmBackendError(f"the vLLM process ended with {how}; its stderr ended: {tail}")
    return None


def _feed(process: subprocess.Popen, document: str) -> None:
    try:
        process.stdin.write(document)
        process.stdin.close()
    except (BrokenPipeError, OSError):  # it died first: its exit status says why
        pass


class _DriverOutput:
    """The driver's lines, read as they come into one :class:`RunRecord` per workload."""

    def __init__(self, workloads: Sequence[VllmWorkload]):
        self.records = [RunRecord(w) for w in workloads]
        self.lines_read = 0
        self.failure: Optional[VllmBackendError] = None

    def feed(self, line: str) -> bool:
        """Read one line; False (and ``failure`` set) when it is not the driver's protocol."""
        self.lines_read += 1
        try:
            message = json.loads(line)
            if message["kind"] == "hello":
                if message["vllm"] != VLLM_VERSION:
                    raise ValueError(f"the environment runs vLLM {message['vllm']}, not {VLLM_VERSION}")
                return True
            run = message["run"]
            if type(run) is not int or not 0 <= run < len(self.records):
                raise IndexError(f"no run {run!r}")
            self.records[run].read(message)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            self.failure = VllmBackendError(
                f"line {self.lines_read} of the vLLM driver's output is not its protocol "
                f"({type(exc).__name__}: {exc}): {line[:200]!r}")
            return False
        return True

    def records_after(self, failure: Optional[BaseException]) -> List["RunRecord"]:
        """The records, each run the lines did not finish ending with ``failure``."""
        for record in self.records:
            if not record.ended and record.startup_error is None:
                record.failure = failure or VllmBackendError(
                    "the vLLM driver's output ended before this run did")
        return self.records


class RunRecord:
    """What the real scheduler did on one workload, as the driver reported it: per request
    its steps (start, first token, preemptions, end), tokens and rejection message, and per
    step the pool and queues (:data:`STEP_FIELDS`). ``result()`` makes it a SimulationResult;
    ``to_json``/``from_json`` store it compactly."""

    #: The driver's per-step row.
    STEP_FIELDS = ("step", "free_blocks", "running", "waiting", "num_context", "num_generation",
                   "tokens_scheduled", "num_recompute_paused")

    def __init__(self, workload: VllmWorkload):
        self.workload = workload
        self.requests = {r.request_id: Request(r.request_id, r.prompt_len, r.max_new_tokens,
                                               r.arrival_step) for r in workload.requests}
        self.preemptions: Dict[str, List[int]] = {i: [] for i in self.requests}
        self.rows: Optional[List[list]] = []
        self.startup_error: Optional[str] = None
        self.end_step = self.iterations = 0
        self.ended = False
        self.failure: Optional[BaseException] = None

    def read(self, message: dict) -> None:
        kind = message["kind"]
        if kind == "startup_error":
            self.startup_error = message["message"]
        elif kind == "event":
            self._event(message)
        elif kind == "steps":
            self.rows.extend(message["rows"])
            self.end_step = max(self.end_step, self.rows[-1][0] + 1)
        elif kind == "end":
            self.end_step, self.iterations, self.ended = message["end_step"], message["iterations"], True
        elif kind != "start":
            raise ValueError(f"unknown kind {kind!r}")

    def _event(self, message: dict) -> None:
        request, step, name = self.requests[message["id"]], message["step"], message["event"]
        self.end_step = max(self.end_step, step + 1)
        if name == "rejected":
            request.state, request.reason = "rejected", message["message"]
            request.end_step = step
        elif name == "started":
            request.state, request.first_scheduled_step = "running", step
        elif name == "first_token":
            request.first_token_step = step
        elif name == "resumed":
            request.state = "running"
        elif name == "preempted":
            request.state = "waiting"
            request.num_recomputes += 1
            self.preemptions[request.request_id].append(step)
        elif name == "finished":
            request.state, request.end_step = "finished", step
            request.num_generated = message["num_output_tokens"]
            if message["cause"] == "max_model_len":
                request.output_limit = request.num_generated
        else:
            raise ValueError(f"unknown event {name!r}")

    def result(self) -> SimulationResult:
        if self.startup_error is not None:
            return refused_to_start(self.workload.requests, self.startup_error)
        error = self.failure
        for request in self.requests.values():
            if request.arrival_step < self.end_step or request.end_step is not None:
                request.activated_step = request.arrival_step  # vLLM queues every arrival
            if request.state == "finished":
                request.reason = finished_reason(request, request.end_step)
            elif request.state != "rejected":
                request.reason = self._unfinished_reason(request, error)
        return SimulationResult(
            status={i: r.state for i, r in self.requests.items()},
            reasons={i: r.reason for i, r in self.requests.items()}, error=error,
            trace=self._trace(), requests=self.requests, end_step=self.end_step,
            iterations=self.iterations if self.ended else len(self.rows or ()))

    def _unfinished_reason(self, request: Request, error) -> str:
        if error is not None:
            return (f"the vLLM process stopped at step {self.end_step - 1} with this request "
                    f"{request.state}: {error}")
        if request.arrival_step >= self.end_step:
            return (f"not submitted: it arrives at step {request.arrival_step}, and the run ended "
                    f"at max_steps={self.workload.max_steps}")
        return (f"still {request.state} when the run ended at max_steps={self.workload.max_steps} "
                "(vLLM has no stall detector)")

    def _trace(self) -> Trace:
        """The step records (none when the record kept no rows) and the requests' events."""
        events = []
        for request in self.requests.values():
            if request.state == "rejected":
                events.append(Event(request.end_step, "rejected", request.request_id, request.reason))
                continue
            if request.first_scheduled_step is not None:
                events.append(Event(request.first_scheduled_step, "started", request.request_id))
            if request.first_token_step is not None:
                events.append(Event(request.first_token_step, "first_token", request.request_id))
            events += [Event(step, "recompute_paused", request.request_id)
                       for step in self.preemptions[request.request_id]]
            if request.state == "finished":
                events.append(Event(request.end_step, "finished", request.request_id))
        trace = Trace()
        trace.events = sorted(events, key=lambda e: (e.step, EVENT_KINDS.index(e.kind)))
        ended = sorted((e.step, e.kind) for e in trace.events if e.kind in ("rejected", "finished"))
        rejected = finished = position = 0
        for step, free, running, waiting, contexts, generations, tokens, preempted in self.rows or ():
            while position < len(ended) and ended[position][0] <= step:
                rejected += ended[position][1] == "rejected"
                finished += ended[position][1] == "finished"
                position += 1
            trace.steps.append(StepRecord(step, free, self.workload.args.num_gpu_blocks - free, 0,
                                          running, waiting, 0, 0, contexts, generations, tokens, 0,
                                          preempted, rejected, finished, 0))
        return trace

    # -- storing -----------------------------------------------------------------------
    def to_json(self, keep_steps: bool = True) -> dict:
        """The workload (its engine and requests as the driver got them) and what vLLM did:
        one row per request ``[id, prompt_len, max_new_tokens, arrival_step, state,
        first_scheduled_step, first_token_step, end_step, num_generated, stopped_at_max_model_len,
        preemption steps, rejection message]``, the step rows (or None), the run's end."""
        if self.failure is not None:
            raise self.failure
        stored = driver_input(self.workload)
        stored.pop("requests")
        stored.update(startup_error=self.startup_error, end_step=self.end_step,
                      iterations=self.iterations, steps=self.rows if keep_steps else None,
                      requests=[[r.request_id, r.prompt_len, r.max_new_tokens, r.arrival_step,
                                 r.state, r.first_scheduled_step, r.first_token_step, r.end_step,
                                 r.num_generated, r.output_limit < r.max_new_tokens,
                                 self.preemptions[r.request_id],
                                 r.reason if r.state == "rejected" else None]
                                for r in self.requests.values()])
        return stored

    @classmethod
    def from_json(cls, stored: dict) -> "RunRecord":
        engine = stored["engine"]
        geometry = KVGeometry(engine["num_layers"], engine["num_kv_heads"], engine["head_dim"],
                              engine["dtype"], engine["block_size"])
        args = VllmEngineArgs(geometry, engine["num_gpu_blocks"], engine["max_model_len"],
                              engine["max_num_seqs"], engine["max_num_batched_tokens"],
                              engine["enable_chunked_prefill"], engine["scheduler_reserve_full_isl"],
                              engine["watermark"], engine["startup_num_gpu_blocks"])
        rows = stored["requests"]
        record = cls(VllmWorkload(stored["name"], args, [Request(*row[:4]) for row in rows],
                                  stored["max_steps"]))
        record.startup_error = stored["startup_error"]
        record.end_step, record.iterations, record.ended = stored["end_step"], stored["iterations"], True
        record.rows = stored["steps"]
        for row in rows:
            request = record.requests[row[0]]
            (request.state, request.first_scheduled_step, request.first_token_step,
             request.end_step, request.num_generated) = row[4:9]
            if row[9]:
                request.output_limit = request.num_generated
            record.preemptions[request.request_id] = row[10]
            request.num_recomputes = len(row[10])
            if row[11] is not None:
                request.reason = row[11]
        return record


# --- stored runs ------------------------------------------------------------------------------

#: Workloads whose stored runs keep every step row (notebook 04 draws them); the long traces
#: keep their requests only, so the file stays small.
STEP_ROWS_KEPT = ("nb04/", "shrunk/", "front-door", "startup-refused", "tiny/")


def record(workloads: Sequence[VllmWorkload], path: Path = STORED, command: str = "",
           timeout_s: Optional[float] = None) -> dict:
    """Run ``workloads`` on the real scheduler and store them at ``path`` (module docstring);
    a run that failed is not stored (its VllmBackendError is raised)."""
    document = dict(vllm=VLLM_VERSION, command=command or " ".join(sys.argv),
                    recorded=datetime.date.today().isoformat(),
                    workloads=[record.to_json(record.workload.name.startswith(STEP_ROWS_KEPT))
                               for record in _run(workloads, timeout_s)])
    Path(path).write_text(json.dumps(document, separators=(",", ":")) + "\n", encoding="utf-8")
    return document


def stored_records(path: Path = STORED) -> Dict[str, RunRecord]:
    """The stored real-vLLM runs by workload name."""
    document = json.loads(Path(path).read_text(encoding="utf-8"))
    return {stored["name"]: RunRecord.from_json(stored) for stored in document["workloads"]}


def stored_results(path: Path = STORED) -> Dict[str, SimulationResult]:
    """The stored real-vLLM runs by workload name, as :func:`run_workloads` returns them."""
    return {name: record.result() for name, record in stored_records(path).items()}


def real_runs(names: Sequence[str], live: bool = False) -> Tuple[Dict[str, SimulationResult], str]:
    """Real vLLM's answers for the named conformance workloads, and where they come from: run
    now in vLLM's environment when ``live`` (VllmUnavailable without it), else the stored runs."""
    workloads = workloads_by_name()
    unknown = [name for name in names if name not in workloads]
    if unknown:
        raise ValueError(f"names must be conformance workloads ({sorted(workloads)}), got {unknown}")
    if live:
        results = run_workloads([workloads[name] for name in names])
        return dict(zip(names, results)), f"real vLLM {VLLM_VERSION}, run now"
    stored = stored_results()
    header = stored_header()
    return ({name: stored[name] for name in names},
            f"real vLLM {header['vllm']}, stored run of {header['recorded']}")


def stored_header(path: Path = STORED) -> dict:
    """The stored file's header: vLLM's version, the command that made it, the date."""
    document = json.loads(Path(path).read_text(encoding="utf-8"))
    return {key: document[key] for key in ("vllm", "command", "recorded")}


__all__ = ["DRIVER", "SETUP_COMMAND", "STORED", "RunRecord", "VllmBackendError", "VllmUnavailable",
           "environment_dir", "is_available", "real_runs", "record", "run",
           "run_workloads", "stored_header", "stored_records", "stored_results", "vllm_python"]
