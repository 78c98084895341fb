"""A real serving engine's scheduler run as a subprocess, in the engine's own environment.

vLLM and SGLang pin their own torch, so each lives in a virtual environment of its own, made once
by ``bash scripts/setup.sh NAME`` in a cache folder (``$KVLAB_<NAME>_ENV``, else
``$XDG_CACHE_HOME/kvlab/NAME-VERSION``, else ``~/.cache/kvlab/NAME-VERSION``). A
:class:`RealEngine` starts that environment's Python on the engine's driver (a program beside this
file that imports the engine, never kvlab), sends the workloads as one JSON document and reads
back JSON lines as they come (the protocol in each driver's docstring): per request its
start, first token, preemptions, rejection, abort or finish, and per step the pool and queues.
Each workload comes back as what ``kvlab.simulate`` returns, a
:class:`~kvlab.run.simulation.SimulationResult`, so tables and figures take either.

Nothing is lost: a request the engine rejects is "rejected" with the engine's own message; when
the engine refuses to start, every request is rejected with that message and ``result.error`` is
a ValueError; when the process dies, hangs past ``timeout_s`` or writes off the protocol,
``result.error`` is an :class:`EngineProcessError` with the end of its stderr, and each request
keeps the status the events gave it, with a reason that says so. Without the environment,
:class:`EngineUnavailable` names the setup command.

``record`` stores real runs in data/measurements/ (the engine's version, the command, the date,
each workload as the driver got it and what the engine did); ``stored_results`` rebuilds them,
so a notebook shows the real engine's answers without its environment.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvlab.analysis.peer_conformance import PeerWorkload
from kvlab.core.checks import check_float
from kvlab.core.paths import DATA_DIR
from kvlab.core.request import Request, RequestState
from kvlab.run.simulation import SimulationResult, finished_reason, refused_to_start
from kvlab.run.trace import EVENT_KINDS, Event, StepRecord, Trace

#: Lines of the engine process's stderr kept in an EngineProcessError.
STDERR_TAIL = 20
#: The causes of a finish at the request's own max_new_tokens (any other is a length limit).
OWN_LIMIT = ("max_tokens", "max_new_tokens")


class EngineUnavailable(RuntimeError):
    """The engine's environment is not set up on this machine."""


class EngineProcessError(RuntimeError):
    """The engine's process died, hung or wrote something that is not the driver's protocol."""


@dataclass(frozen=True)
class RealEngine:
    """A real engine kvlab drives: ``name`` (as ``scripts/setup.sh`` knows it), ``title``,
    ``version``, its ``driver``, how a workload's engine arguments are written for the driver
    (``engine_input``, ValueError for what the driver cannot run) and read back
    (``args_from_input``), the pool's size in blocks (``pool_blocks``), the stored workloads that
    keep their step rows (names starting so), and ``python``: the interpreter (None: the
    environment's)."""

    name: str
    title: str
    version: str
    driver: Path
    engine_input: Callable[[Any], dict]
    args_from_input: Callable[[dict], Any]
    pool_blocks: Callable[[Any], int]
    step_rows_kept: tuple[str, ...] = ()
    python: Path | None = None

    # -- the environment ------------------------------------------------------------------
    @property
    def setup_command(self) -> str:
        return f"bash scripts/setup.sh {self.name}"

    @property
    def stored_path(self) -> Path:
        return DATA_DIR / "measurements" / f"{self.name}-{self.version}.json"

    def environment_dir(self) -> Path:
        """Where ``bash scripts/setup.sh NAME`` makes the engine's environment."""
        override = os.environ.get(f"KVLAB_{self.name.upper()}_ENV")
        if override:
            return Path(override)
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return Path(cache) / "kvlab" / f"{self.name}-{self.version}"

    def interpreter(self) -> Path:
        """The environment's Python; EngineUnavailable, naming the setup command, when it is
        not ready."""
        if self.python is not None:
            return self.python
        env = self.environment_dir()
        python = env / "bin" / "python"
        if not (env / "kvlab-ready").is_file() or not python.is_file():
            raise EngineUnavailable(
                f"{self.title} {self.version}'s environment is not set up at "
                f"{env}: run `{self.setup_command}` once (several GB and a "
                "few minutes; it is cached after that)"
            )
        return python

    def is_available(self) -> bool:
        try:
            self.interpreter()
        except EngineUnavailable:
            return False
        return True

    # -- runs -----------------------------------------------------------------------------
    def driver_input(self, workload: PeerWorkload) -> dict:
        """One workload as the driver reads it."""
        return dict(
            name=workload.name,
            engine=self.engine_input(workload.args),
            requests=[
                [r.request_id, r.prompt_len, r.max_new_tokens, r.arrival_step]
                for r in workload.requests
            ],
            max_steps=workload.max_steps,
        )

    def run(
        self,
        args,
        requests: Iterable[Request],
        max_steps: int = 100_000,
        timeout_s: float | None = None,
    ) -> SimulationResult:
        """The real scheduler on one workload (module docstring)."""
        return self.run_workloads(
            [PeerWorkload("run", args, tuple(requests), max_steps)], timeout_s
        )[0]

    def run_workloads(
        self, workloads: Sequence[PeerWorkload], timeout_s: float | None = None
    ) -> list[SimulationResult]:
        """The real scheduler on each workload, all in one process (its start-up takes
        seconds); ``timeout_s`` bounds the whole process (None: no bound)."""
        return [record.result() for record in self.records(workloads, timeout_s)]

    def records(
        self, workloads: Sequence[PeerWorkload], timeout_s: float | None = None
    ) -> list[RunRecord]:
        """What the engine did on each workload, as :class:`RunRecord`s."""
        workloads = list(workloads)
        if not all(isinstance(w, PeerWorkload) for w in workloads):
            raise TypeError("workloads must hold PeerWorkload objects")
        if timeout_s is not None:
            timeout_s = check_float("timeout_s", timeout_s, low=0.0, high=86_400.0, low_open=True)
        document = json.dumps({"runs": [self.driver_input(w) for w in workloads]})
        output = _DriverOutput(self, workloads)
        failure = _communicate(self, document, timeout_s, output)
        return output.records_after(failure)

    # -- stored runs ----------------------------------------------------------------------
    def record(
        self,
        workloads: Sequence[PeerWorkload],
        command: str = "",
        timeout_s: float | None = None,
        path: Path | None = None,
    ) -> dict:
        """Run ``workloads`` and store them (module docstring); a run that failed is not
        stored (its EngineProcessError is raised)."""
        document = dict(
            engine=self.name,
            version=self.version,
            command=command or " ".join(sys.argv),
            recorded=datetime.date.today().isoformat(),
            workloads=[
                record.to_json(record.workload.name.startswith(self.step_rows_kept))
                for record in self.records(workloads, timeout_s)
            ],
        )
        Path(path or self.stored_path).write_text(
            json.dumps(document, separators=(",", ":")) + "\n", encoding="utf-8"
        )
        return document

    def stored_document(self) -> dict:
        return json.loads(self.stored_path.read_text(encoding="utf-8"))

    def stored_header(self) -> dict:
        """The stored file's header: the version, the command that made it, the date."""
        document = self.stored_document()
        return {key: document[key] for key in ("version", "command", "recorded")}

    def stored_records(self) -> dict[str, RunRecord]:
        """The stored runs by workload name."""
        return {
            stored["name"]: RunRecord.from_json(self, stored)
            for stored in self.stored_document()["workloads"]
        }

    def stored_results(self) -> dict[str, SimulationResult]:
        """The stored runs by workload name, as :meth:`run_workloads` returns them."""
        return {name: record.result() for name, record in self.stored_records().items()}

    def real_runs(
        self, workloads: dict[str, PeerWorkload], names: Sequence[str], live: bool = False
    ) -> tuple[dict[str, SimulationResult], str]:
        """The engine's answers for the named ``workloads``, and where they come from: run now
        in its environment when ``live`` (EngineUnavailable without it), else the stored runs."""
        unknown = [name for name in names if name not in workloads]
        if unknown:
            raise ValueError(
                f"names must be conformance workloads ({sorted(workloads)}), got {unknown}"
            )
        if live:
            results = self.run_workloads([workloads[name] for name in names])
            return dict(zip(names, results)), f"real {self.title} {self.version}, run now"
        stored, header = self.stored_results(), self.stored_header()
        return (
            {name: stored[name] for name in names},
            f"real {self.title} {header['version']}, stored run of {header['recorded']}",
        )

    def with_driver(self, driver: Path, python: Path) -> RealEngine:
        """This engine with another driver and interpreter (for tests of the process's edges)."""
        return dataclasses.replace(self, driver=driver, python=python)


def _communicate(
    engine: RealEngine, document: str, timeout_s: float | None, output: _DriverOutput
) -> EngineProcessError | None:
    """Run the driver, handing ``output`` its lines as they come; None, or the
    EngineProcessError that ended it (a timeout, a death, a line off the protocol: then it is
    killed, with its whole process group)."""
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_LOGGING_LEVEL="ERROR",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
    )
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as stderr:
        process = subprocess.Popen(
            [str(engine.interpreter()), "-I", str(engine.driver)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            text=True,
            encoding="utf-8",
            start_new_session=True,
        )
        timed_out = threading.Event()

        def kill():  # the whole group: a child holding its stdout would keep us reading
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
    what = f"the {engine.title} process"
    if output.failure is not None:
        return output.failure
    if timed_out.is_set():
        return EngineProcessError(
            f"{what} ran past timeout_s={timeout_s:g} s and was killed; its stderr ended: {tail}"
        )
    if returncode != 0:
        how = f"signal {-returncode}" if returncode < 0 else f"exit code {returncode}"
        return EngineProcessError(f"{what} ended with {how}; its stderr ended: {tail}")
    return None


def _feed(process: subprocess.Popen, document: str) -> None:
    try:
        process.stdin.write(document)
        process.stdin.close()
    except (BrokenPipeError, OSError):  # it died first: its exit status says why
        pass


class _DriverOutput:
    """The driver's lines, read as they come into one :class:`RunRecord` per workload."""

    def __init__(self, engine: RealEngine, workloads: Sequence[PeerWorkload]):
        self.engine = engine
        self.records = [RunRecord(engine, w) for w in workloads]
        self.lines_read = 0
        self.failure: EngineProcessError | None = None

    def feed(self, line: str) -> bool:
        """Read one line; False (and ``failure`` set) when it is not the driver's protocol."""
        self.lines_read += 1
        try:
            message = json.loads(line)
            if message["kind"] == "hello":
                if message[self.engine.name] != self.engine.version:
                    raise ValueError(
                        f"the environment runs {self.engine.title} "
                        f"{message[self.engine.name]}, not {self.engine.version}"
                    )
                return True
            run = message["run"]
            if type(run) is not int or not 0 <= run < len(self.records):
                raise IndexError(f"no run {run!r}")
            self.records[run].read(message)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            self.failure = EngineProcessError(
                f"line {self.lines_read} of the {self.engine.title} driver's output is not its "
                f"protocol ({type(exc).__name__}: {exc}): {line[:200]!r}"
            )
            return False
        return True

    def records_after(self, failure: BaseException | None) -> list[RunRecord]:
        """The records, each run the lines did not finish ending with ``failure``."""
        for record in self.records:
            if not record.ended and record.startup_error is None:
                record.failure = failure or EngineProcessError(
                    f"the {self.engine.title} driver's output ended before this run did"
                )
        return self.records


class RunRecord:
    """What the real scheduler did on one workload, as the driver reported it: per request
    its steps (start, first token, preemptions, end), tokens and rejection message, and per
    step the pool and queues. ``result()`` makes it a SimulationResult; ``to_json`` and
    ``from_json`` store it compactly."""

    def __init__(self, engine: RealEngine, workload: PeerWorkload):
        self.engine = engine
        self.workload = workload
        self.requests = {
            r.request_id: Request(r.request_id, r.prompt_len, r.max_new_tokens, r.arrival_step)
            for r in workload.requests
        }
        self.preemptions: dict[str, list[int]] = {i: [] for i in self.requests}
        self.aborted: set = set()
        self.rows: list[list] | None = []
        self.startup_error: str | None = None
        self.end_step = self.iterations = 0
        self.ended = False
        self.failure: BaseException | None = None

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
            self.end_step, self.iterations, self.ended = (
                message["end_step"],
                message["iterations"],
                True,
            )
        elif kind != "start":
            raise ValueError(f"unknown kind {kind!r}")

    def _event(self, message: dict) -> None:
        request, step, name = self.requests[message["id"]], message["step"], message["event"]
        self.end_step = max(self.end_step, step + 1)
        if name in ("rejected", "aborted"):
            request.state, request.reason, request.end_step = "rejected", message["message"], step
            if name == "aborted":
                self.aborted.add(request.request_id)
        elif name == "started":
            request.state, request.first_scheduled_step = RequestState.RUNNING, step
        elif name == "first_token":
            request.first_token_step = step
        elif name == "resumed":
            request.state = RequestState.RUNNING
        elif name == "preempted":
            request.state = RequestState.WAITING
            request.num_recomputes += 1
            self.preemptions[request.request_id].append(step)
        elif name == "finished":
            request.state, request.end_step = "finished", step
            request.num_generated = message["num_output_tokens"]
            if message["cause"] not in OWN_LIMIT:
                request.output_limit = request.num_generated
        else:
            raise ValueError(f"unknown event {name!r}")

    def result(self) -> SimulationResult:
        if self.startup_error is not None:
            return refused_to_start(self.workload.requests, self.startup_error)
        error = self.failure
        for request in self.requests.values():
            if request.arrival_step < self.end_step or request.end_step is not None:
                request.activated_step = request.arrival_step  # the engine queues every arrival
            if request.state == "finished":
                request.reason = finished_reason(request, request.end_step)
            elif request.state != "rejected":
                request.reason = self._unfinished_reason(request, error)
        return SimulationResult(
            status={i: r.state for i, r in self.requests.items()},
            reasons={i: r.reason for i, r in self.requests.items()},
            error=error,
            trace=self._trace(),
            requests=self.requests,
            end_step=self.end_step,
            iterations=self.iterations if self.ended else len(self.rows or ()),
        )

    def _unfinished_reason(self, request: Request, error) -> str:
        if error is not None:
            return (
                f"the {self.engine.title} process stopped at step {self.end_step - 1} with "
                f"this request {request.state}: {error}"
            )
        if request.arrival_step >= self.end_step:
            return (
                f"not submitted: it arrives at step {request.arrival_step}, and the run ended "
                f"at max_steps={self.workload.max_steps}"
            )
        return (
            f"still {request.state} when the run ended at max_steps={self.workload.max_steps} "
            f"({self.engine.title} has no stall detector)"
        )

    def _trace(self) -> Trace:
        """The step records (none when the record kept no rows) and the requests' events."""
        events = []
        for request in self.requests.values():
            if request.state == "rejected":
                kind = "aborted" if request.request_id in self.aborted else "rejected"
                events.append(Event(request.end_step, kind, request.request_id, request.reason))
            if request.first_scheduled_step is not None:
                events.append(Event(request.first_scheduled_step, "started", request.request_id))
            if request.first_token_step is not None:
                events.append(Event(request.first_token_step, "first_token", request.request_id))
            events += [
                Event(step, "recompute_paused", request.request_id)
                for step in self.preemptions[request.request_id]
            ]
            if request.state == "finished":
                events.append(Event(request.end_step, "finished", request.request_id))
        trace = Trace()
        trace.events = sorted(events, key=lambda e: (e.step, EVENT_KINDS.index(e.kind)))
        ended = sorted(
            (e.step, e.kind) for e in trace.events if e.kind in ("rejected", "aborted", "finished")
        )
        pool = self.engine.pool_blocks(self.workload.args)
        rejected = finished = position = 0
        for step, free, running, waiting, contexts, generations, tokens, preempted in (
            self.rows or ()
        ):
            while position < len(ended) and ended[position][0] <= step:
                rejected += ended[position][1] != "finished"
                finished += ended[position][1] == "finished"
                position += 1
            trace.steps.append(
                StepRecord(
                    step,
                    free,
                    pool - free,
                    0,
                    running,
                    waiting,
                    0,
                    0,
                    contexts,
                    generations,
                    tokens,
                    0,
                    preempted,
                    rejected,
                    finished,
                    0,
                )
            )
        return trace

    # -- storing -----------------------------------------------------------------------
    def to_json(self, keep_steps: bool = True) -> dict:
        """The workload as the driver got it and what the engine did: one row per request
        ``[id, prompt_len, max_new_tokens, arrival_step, state ("aborted" for an abort),
        first_scheduled_step, first_token_step, end_step, num_generated, stopped_by_a_length_limit,
        preemption steps, rejection message]``, the step rows (or None), the run's end."""
        if self.failure is not None:
            raise self.failure
        stored = self.engine.driver_input(self.workload)
        stored.pop("requests")
        stored.update(
            startup_error=self.startup_error,
            end_step=self.end_step,
            iterations=self.iterations,
            steps=self.rows if keep_steps else None,
            requests=[
                [
                    r.request_id,
                    r.prompt_len,
                    r.max_new_tokens,
                    r.arrival_step,
                    "aborted" if r.request_id in self.aborted else r.state,
                    r.first_scheduled_step,
                    r.first_token_step,
                    r.end_step,
                    r.num_generated,
                    r.output_limit < r.max_new_tokens,
                    self.preemptions[r.request_id],
                    r.reason if r.state == "rejected" else None,
                ]
                for r in self.requests.values()
            ],
        )
        return stored

    @classmethod
    def from_json(cls, engine: RealEngine, stored: dict) -> RunRecord:
        rows = stored["requests"]
        record = cls(
            engine,
            PeerWorkload(
                stored["name"],
                engine.args_from_input(stored["engine"]),
                [Request(*row[:4]) for row in rows],
                stored["max_steps"],
            ),
        )
        record.startup_error = stored["startup_error"]
        record.end_step, record.iterations, record.ended = (
            stored["end_step"],
            stored["iterations"],
            True,
        )
        record.rows = stored["steps"]
        for row in rows:
            request = record.requests[row[0]]
            (
                state,
                request.first_scheduled_step,
                request.first_token_step,
                request.end_step,
                request.num_generated,
            ) = row[4:9]
            request.state = RequestState("rejected" if state == "aborted" else state)
            if state == "aborted":
                record.aborted.add(request.request_id)
            if row[9]:
                request.output_limit = request.num_generated
            record.preemptions[request.request_id] = row[10]
            request.num_recomputes = len(row[10])
            if row[11] is not None:
                request.reason = row[11]
        return record


__all__ = ["EngineProcessError", "EngineUnavailable", "RealEngine", "RunRecord"]
