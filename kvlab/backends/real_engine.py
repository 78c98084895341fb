"""A real engine's scheduler run as a subprocess in its own environment, and its stored runs.

vLLM and SGLang pin their own torch, so each lives in a virtual environment that
``bash scripts/setup.sh NAME`` makes once. A :class:`RealEngine` runs that environment's Python
on the engine's driver (a script beside this file that never imports kvlab), sends the workloads
as one JSON document and reads JSON lines back (docs/ENGINES.md gives the protocol). Each
workload comes back as what ``kvlab.simulate`` returns. A process that dies, hangs past
``timeout_s`` or leaves the protocol loses no request: ``result.error`` is an
:class:`EngineProcessError` and each request keeps the state its events gave it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import inspect
import json
import os
import signal
import subprocess
import sys
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from kvlab.analysis.peer_conformance import PeerWorkload
from kvlab.core.cause import Cause, Reason
from kvlab.core.checks import MAX_COUNT, check_float
from kvlab.core.files import FileFormatError, load_json
from kvlab.core.geometry import KVGeometry
from kvlab.core.paths import DATA_DIR
from kvlab.core.prompt_tokens import SAMPLED_TOKEN_ID, prompt_token_runs
from kvlab.core.request import MOONCAKE_TOKENS_PER_HASH, Request, RequestState
from kvlab.run.simulation import SimulationResult, finished_reason, refused_to_start
from kvlab.run.trace import EVENT_KINDS, Event, StepRecord, Trace

#: Lines of the engine process's stderr kept in an EngineProcessError.
STDERR_TAIL = 20
#: The largest stored-runs file read (the stored files are about 5 MB).
MAX_STORED_BYTES = 64 << 20
#: The seconds an engine process may run when the caller names none: the stored SGLang runs,
#: the longest, take about 750 s on a 2-core machine.
DEFAULT_TIMEOUT_S = 3600.0
#: The causes of a finish at the request's own max_new_tokens (any other is a length limit).
OWN_LIMIT = ("max_tokens", "max_new_tokens")
#: The KV geometry every driver's input starts with.
GEOMETRY_KEYS = ("num_layers", "num_kv_heads", "head_dim", "dtype")
#: A driver's step row, by StepRecord's names (SGLang's rows go on with its radix cache's
#: evictable and protected tokens, which StepRecord has no place for).
ROW_FIELDS = (
    "step free_blocks running waiting num_context num_generation tokens_scheduled "
    "num_recompute_paused"
).split()
#: What a real engine's step row has no part of: kvlab's host tier, queue, suspension, stalls.
UNREPORTED = dict.fromkeys(
    ("host_blocks", "queued", "suspended", "num_paused", "stalled_passes"), 0
)
#: A stored request's row holds these fields of its Request between its state and its flag.
STORED_FIELDS = ("first_scheduled_step", "first_token_step", "end_step", "num_generated")
#: The driver's environment: offline, no usage reports, vLLM's log quiet.
DRIVER_ENV = dict(
    HF_HUB_OFFLINE="1",
    TRANSFORMERS_OFFLINE="1",
    VLLM_LOGGING_LEVEL="ERROR",
    VLLM_NO_USAGE_STATS="1",
    DO_NOT_TRACK="1",
)


class EngineUnavailable(RuntimeError):
    """The engine's environment is not set up on this machine."""


class EngineProcessError(RuntimeError):
    """The engine's process died, hung or wrote something that is not the driver's protocol."""


def args_input(args: Any) -> dict:
    """An engine's arguments (a dataclass with a ``geometry``) as its driver reads them: the
    geometry's :data:`GEOMETRY_KEYS`, then every other field by its name."""
    fields = {f.name: getattr(args, f.name) for f in dataclasses.fields(args)}
    geometry = fields.pop("geometry")
    return {key: getattr(geometry, key) for key in GEOMETRY_KEYS} | fields


@dataclasses.dataclass(frozen=True)
class RealEngine:
    """A real engine: ``name`` (as scripts/setup.sh knows it), ``title``, ``version``, its
    ``driver``; ``engine_input`` writes an ``args_type`` as the driver reads it (ValueError for
    what the driver cannot run), whose ``pool_key`` is the pool in blocks; the stored workloads
    whose names start with ``step_rows_kept`` keep their step rows; ``python``: the interpreter
    (None: the environment's). With ``prompt_tokens`` the driver is sent each prompt's token
    ids (kvlab.core.prompt_tokens) and the sampled token's, and the stored runs keep the
    requests' prefix hashes. ``processes_late(args)``: the engine processes each batch after
    scheduling the next, so a step's row counts as finished only what earlier steps finished."""

    name: str
    title: str
    version: str
    driver: Path
    args_type: type
    engine_input: Callable[[Any], dict]
    pool_key: str
    step_rows_kept: tuple[str, ...] = ()
    python: Path | None = None
    prompt_tokens: bool = False
    processes_late: Callable[[Any], bool] = lambda args: False

    @property
    def setup_command(self) -> str:
        return f"bash scripts/setup.sh {self.name}"

    @property
    def stored_path(self) -> Path:
        return DATA_DIR / "measurements" / f"{self.name}-{self.version}.json"

    def interpreter(self) -> Path:
        """The environment's Python (in ``$KVLAB_<NAME>_ENV``, else where setup.sh makes it);
        EngineUnavailable, naming the setup command, when it is not ready."""
        if self.python is not None:
            return self.python
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        env = Path(
            os.environ.get(f"KVLAB_{self.name.upper()}_ENV")
            or Path(cache) / "kvlab" / f"{self.name}-{self.version}"
        )
        python = env / "bin" / "python"
        if not (env / "kvlab-ready").is_file() or not python.is_file():
            raise EngineUnavailable(
                f"{self.title} {self.version}'s environment is not set up at {env}: run "
                f"`{self.setup_command}` once (several GB and a few minutes; it is cached after "
                "that)"
            )
        return python

    def is_available(self) -> bool:
        try:
            self.interpreter()
        except EngineUnavailable:
            return False
        return True

    def driver_input(self, workload: PeerWorkload) -> dict:
        """One workload as it is stored: what the driver reads but the prompts' token ids,
        which the prefix hashes (``prefixes``, by request id) give."""
        stored = dict(
            name=workload.name,
            engine=self.engine_input(workload.args),
            requests=[
                [r.request_id, r.prompt_len, r.max_new_tokens, r.arrival_step]
                for r in workload.requests
            ],
            max_steps=workload.max_steps,
        )
        if self.prompt_tokens:
            stored["prefixes"] = {
                r.request_id: [r.tokens_per_hash, list(r.prefix_hashes)]
                for r in workload.requests
                if r.prefix_hashes
            }
        return stored

    def driver_document(self, workload: PeerWorkload) -> dict:
        """One workload as the driver reads it: :meth:`driver_input`, with ``prompt_tokens``
        each prompt's ids as runs ``[first id, count]`` by request id and the sampled id."""
        document = self.driver_input(workload)
        if self.prompt_tokens:
            document["prompts"] = {r.request_id: prompt_token_runs(r) for r in workload.requests}
            document["sampled_token_id"] = SAMPLED_TOKEN_ID
        return document

    def args_from_input(self, engine: dict) -> Any:
        """The arguments :attr:`engine_input` wrote (SGLang's pages hold one token)."""
        geometry = KVGeometry(
            **{key: engine[key] for key in GEOMETRY_KEYS},
            tokens_per_block=engine.get("block_size", 1),
        )
        accepted = inspect.signature(self.args_type).parameters
        return self.args_type(geometry, **{k: v for k, v in engine.items() if k in accepted})

    def run(
        self,
        args,
        requests: Iterable[Request],
        max_steps: int = 100_000,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> SimulationResult:
        """The real scheduler on one workload."""
        workload = PeerWorkload("run", args, tuple(requests), max_steps)
        return self.run_workloads([workload], timeout_s)[0]

    def run_workloads(
        self, workloads: Sequence[PeerWorkload], timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> list[SimulationResult]:
        """The real scheduler on each workload, all in one process (its start-up takes
        seconds); ``timeout_s`` bounds the whole process."""
        return [record.result() for record in self.records(workloads, timeout_s)]

    def records(
        self, workloads: Sequence[PeerWorkload], timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> list[RunRecord]:
        """What the engine did on each workload, as :class:`RunRecord`s."""
        workloads = list(workloads)
        if not all(isinstance(w, PeerWorkload) for w in workloads):
            raise TypeError("workloads must hold PeerWorkload objects")
        timeout_s = check_float("timeout_s", timeout_s, low=0.0, high=86_400.0, low_open=True)
        document = json.dumps({"runs": [self.driver_document(w) for w in workloads]})
        records = [RunRecord(self, w) for w in workloads]
        failure = self._run_driver(document, timeout_s, records)
        for record in records:
            if not record.ended and record.startup_error is None:
                record.failure = failure or EngineProcessError(
                    f"the {self.title} driver's output ended before this run did"
                )
        return records

    def _run_driver(
        self, document: str, timeout_s: float, records: list[RunRecord]
    ) -> EngineProcessError | None:
        """Run the driver on ``document``, each line of its output read into its run's record;
        None, or the EngineProcessError that ended it. A timeout kills its whole process group
        (a child holding its stdout would keep it open), and nothing of it outlives the call.
        EngineUnavailable when the environment's Python cannot be started."""
        python = self.interpreter()
        try:
            process = subprocess.Popen(
                [str(python), "-I", str(self.driver)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=dict(os.environ, **DRIVER_ENV),
                encoding="utf-8",
                errors="replace",
                start_new_session=True,
            )
        except OSError as exc:  # not executable, a broken interpreter, no memory for a process
            raise EngineUnavailable(
                f"{self.title} {self.version}'s Python {python} cannot be started "
                f"({exc.strerror or exc}): run `{self.setup_command}` again"
            ) from None
        timed_out = False
        try:
            output, stderr = process.communicate(document, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(process)
            output, stderr = process.communicate()
        finally:
            _kill_group(process)
        by_run = dict(enumerate(records))
        for number, line in enumerate(output.splitlines(), 1):
            try:
                message = json.loads(line)
                if message["kind"] != "hello":
                    by_run[message["run"]].read(message)
                elif message[self.name] != self.version:
                    raise ValueError(
                        f"the environment runs {self.title} {message[self.name]}, "
                        f"not {self.version}"
                    )
            except (ValueError, KeyError, IndexError, TypeError, RecursionError) as exc:
                return EngineProcessError(
                    f"line {number} of the {self.title} driver's output is not its protocol "
                    f"({type(exc).__name__}: {exc}): {line[:200]!r}"
                )
        what = f"the {self.title} process"
        tail = "\n".join(stderr.splitlines()[-STDERR_TAIL:]).strip()
        if timed_out:
            return EngineProcessError(
                f"{what} ran past timeout_s={timeout_s:g} s and was killed; its stderr ended: {tail}"
            )
        code = process.returncode
        if code != 0:
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            return EngineProcessError(f"{what} ended with {how}; its stderr ended: {tail}")
        return None

    # -- stored runs ----------------------------------------------------------------------
    def record(self, workloads: Sequence[PeerWorkload], command: str = "") -> dict:
        """Run ``workloads`` and store them with the engine's version, the command and the
        date; a run that failed is not stored (its EngineProcessError is raised)."""
        document = dict(
            engine=self.name,
            version=self.version,
            command=command or " ".join(sys.argv),
            recorded=datetime.date.today().isoformat(),
            workloads=[
                record.to_json(record.workload.name.startswith(self.step_rows_kept))
                for record in self.records(workloads)
            ],
        )
        self.stored_path.write_text(
            json.dumps(document, separators=(",", ":")) + "\n", encoding="utf-8"
        )
        return document

    def stored_document(self) -> dict:
        """The stored file (kvlab.core.files' JSON reader), checked to hold this engine's runs
        of this version; FileFormatError naming the file otherwise."""
        path = self.stored_path
        document = load_json(path, f"{self.title}'s stored runs", MAX_STORED_BYTES)
        if not isinstance(document, dict):
            raise FileFormatError(f"{path}: must hold a JSON object, got {type(document).__name__}")
        stored = (document.get("engine"), document.get("version"))
        if stored != (self.name, self.version):
            raise FileFormatError(
                f"{path}: holds the runs of engine {stored[0]!r:.40} version {stored[1]!r:.40}, "
                f"not {self.name!r} {self.version!r}"
            )
        return document

    def stored_header(self) -> dict:
        """The stored file's header: the version, the command that made it, the date."""
        return self._header_of(self.stored_document())

    def stored_records(self) -> dict[str, RunRecord]:
        """The stored runs by workload name; ValueError for a file that is not such runs."""
        return self._records_in(self.stored_document())

    def _header_of(self, document: dict) -> dict:
        header = {key: document.get(key) for key in ("version", "command", "recorded")}
        if not all(isinstance(value, str) for value in header.values()):
            shown = f"version, command and recorded must be strings, got {header}"
            raise FileFormatError(f"{self.stored_path}: {shown[:300]}")
        return header

    def _records_in(self, document: dict) -> dict[str, RunRecord]:
        try:
            workloads = document["workloads"]
            if not isinstance(workloads, list) or not all(isinstance(w, dict) for w in workloads):
                raise TypeError("workloads must be a list of objects")
            records = [RunRecord.from_json(self, w) for w in workloads]
            names = [record.workload.name for record in records]
            twice = sorted({name for name in names if names.count(name) > 1})
            if twice:
                raise ValueError(f"the workload {twice[0]!r:.40} is stored twice")
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ValueError(
                f"{self.stored_path.name} must hold {self.title}'s stored runs as "
                f"RealEngine.record writes them ({type(exc).__name__}: {exc})"[:500]
            ) from None
        return dict(zip(names, records))

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
        document = self.stored_document()  # read once: several MB of JSON
        records, header = self._records_in(document), self._header_of(document)
        return (
            {name: records[name].result() for name in names},
            f"real {self.title} {header['version']}, stored run of {header['recorded']}",
        )


def _is_count(value: object, high: int = MAX_COUNT) -> bool:
    """An int in [0, high] (a bool is not one)."""
    return type(value) is int and 0 <= value <= high


def _count(message: dict, key: str, high: int = MAX_COUNT) -> int:
    """``message[key]``, an int in [0, high], else ValueError naming it (the value cut short:
    a driver's line can be long, which kvlab.core.checks.check_int would quote whole)."""
    value = message[key]
    if not _is_count(value, high):
        raise ValueError(f"{key} must be an int in [0, {high}], got {value!r:.40}")
    return value


def _text(message: dict, key: str) -> str:
    """``message[key]``, a string, else ValueError naming it."""
    value = message[key]
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string, got {value!r:.40}")
    return value


def _is_row(row: object) -> bool:
    """A step row: at least the ROW_FIELDS' counts, every entry an int in [0, MAX_COUNT]."""
    return isinstance(row, list) and len(row) >= len(ROW_FIELDS) and all(map(_is_count, row))


#: The states a stored request row may hold.
STORED_STATES = ("waiting", "running", "finished", "rejected", "aborted")


def _check_stored_row(row: Any) -> None:
    """A stored request row as :meth:`RunRecord.to_json` writes it, else ValueError."""
    ok = (
        isinstance(row, list)
        and len(row) == 12
        and isinstance(row[0], str)
        and all(map(_is_count, row[1:4]))
        and row[4] in STORED_STATES
        and all(v is None or _is_count(v) for v in row[5:9])
        and type(row[9]) is bool
        and isinstance(row[10], list)
        and all(map(_is_count, row[10]))
        and (row[11] is None or isinstance(row[11], str))
    )
    if not ok:
        raise ValueError(
            "a request row must be [id, prompt_len, max_new_tokens, arrival_step, state (one of "
            f"{', '.join(STORED_STATES)}), first_scheduled_step, first_token_step, end_step, "
            f"num_generated, limited, preemption steps, message], got {row!r:.120}"
        )


def _kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


class RunRecord:
    """What the real scheduler did on one workload, as the driver reported it: per request its
    steps, tokens and rejection message, per step the pool and queues. ``result()`` makes it a
    SimulationResult; ``to_json`` and ``from_json`` store it compactly."""

    def __init__(self, engine: RealEngine, workload: PeerWorkload):
        self.engine, self.workload = engine, workload
        self.requests = {
            r.request_id: Request(r.request_id, r.prompt_len, r.max_new_tokens, r.arrival_step)
            for r in workload.requests
        }
        self.preemptions: dict[str, list[int]] = {i: [] for i in self.requests}
        self.aborted: set[str] = set()
        self.rows: list[list] | None = []
        self.startup_error: str | None = None
        self.end_step = self.iterations = 0
        self.ended = False
        self.failure: BaseException | None = None

    def read(self, message: dict) -> None:
        """One line of the driver's protocol about this run, every value checked before it is
        used (ValueError naming the field)."""
        kind = message["kind"]
        if kind == "startup_error":
            self.startup_error = _text(message, "message")
        elif kind == "event":
            self._event(message)
        elif kind == "steps":
            assert self.rows is not None, "a live run keeps its rows"
            rows = message["rows"]
            if not isinstance(rows, list) or not rows or not all(map(_is_row, rows)):
                raise ValueError(
                    f"rows must be a list of rows of at least {len(ROW_FIELDS)} counts "
                    f"({', '.join(ROW_FIELDS)}), got {rows!r:.80}"
                )
            self.rows.extend(rows)
            self.end_step = max(self.end_step, self.rows[-1][0] + 1)
        elif kind == "end":
            self.end_step, self.iterations = (
                _count(message, "end_step"),
                _count(message, "iterations"),
            )
            self.ended = True
        elif kind != "start":
            raise ValueError(f"unknown kind {kind!r:.40}")

    def _event(self, message: dict) -> None:
        request_id, step, name = message["id"], _count(message, "step"), _text(message, "event")
        if not isinstance(request_id, str) or request_id not in self.requests:
            raise ValueError(f"id must be one of the run's request ids, got {request_id!r:.40}")
        request = self.requests[request_id]
        if name in ("rejected", "aborted"):
            words = _text(message, "message")
            request.state = RequestState.REJECTED
            request.reason = Reason(Cause.REJECTED_BY_ENGINE, message=words)
            request.end_step = step
            if name == "aborted":
                self.aborted.add(request.request_id)
        elif name in ("started", "resumed"):
            request.state = RequestState.RUNNING
            if name == "started":
                request.first_scheduled_step = step
        elif name == "first_token":
            request.first_token_step = step
        elif name == "preempted":
            request.state = RequestState.WAITING
            request.num_recomputes += 1
            self.preemptions[request.request_id].append(step)
        elif name == "finished":
            generated = _count(message, "num_output_tokens", request.max_new_tokens)
            cause = _text(message, "cause")
            request.state, request.end_step = RequestState.FINISHED, step
            request.num_generated = generated
            if cause not in OWN_LIMIT:
                request.output_limit = request.num_generated
        else:
            raise ValueError(f"unknown event {name!r:.40}")
        self.end_step = max(self.end_step, step + 1)

    def result(self) -> SimulationResult:
        if self.startup_error is not None:
            return refused_to_start(self.workload.requests, self.startup_error)
        for request in self.requests.values():
            if request.arrival_step < self.end_step or request.end_step is not None:
                request.activated_step = request.arrival_step  # the engine queues every arrival
            if request.state is RequestState.FINISHED:
                assert request.end_step is not None, "a finished request has ended"
                request.reason = finished_reason(request, request.end_step)
            elif request.state is not RequestState.REJECTED:
                request.reason = self._unfinished_reason(request)
        return SimulationResult(
            status={i: r.state for i, r in self.requests.items()},
            reasons={i: r.reason for i, r in self.requests.items()},
            error=self.failure,
            trace=self._trace(),
            requests=self.requests,
            end_step=self.end_step,
            iterations=self.iterations if self.ended else len(self.rows or ()),
        )

    def _unfinished_reason(self, request: Request) -> Reason:
        """Where a request the real engine left unfinished was (it reports no pages)."""
        title, max_steps, state = self.engine.title, self.workload.max_steps, str(request.state)
        if self.failure is not None:
            stopped: dict[str, int | str | bool | None] = {
                "engine": title,
                "step": self.end_step - 1,
                "state": state,
            }
            return Reason(Cause.ENGINE_PROCESS_STOPPED, stopped, message=str(self.failure))
        if request.arrival_step >= self.end_step:
            arrives = dict(arrival_step=request.arrival_step, max_steps=max_steps)
            return Reason(Cause.NOT_SUBMITTED, arrives)
        cause = Cause.STILL_WAITING if state == "waiting" else Cause.STILL_RUNNING
        return Reason(cause, {"state": state, "max_steps": max_steps, "engine": title})

    def _trace(self) -> Trace:
        """The requests' events and the step rows (none when the record kept no rows)."""
        trace = Trace()
        for request in self.requests.values():
            i, end = request.request_id, request.end_step
            if request.state is RequestState.REJECTED:
                assert end is not None, "a rejected request has ended"
                kind = "aborted" if i in self.aborted else "rejected"
                trace.events.append(Event(end, kind, i, request.reason))
            if request.first_scheduled_step is not None:
                trace.events.append(Event(request.first_scheduled_step, "started", i))
            if request.first_token_step is not None:
                trace.events.append(Event(request.first_token_step, "first_token", i))
            trace.events += [Event(step, "recompute_paused", i) for step in self.preemptions[i]]
            if request.state is RequestState.FINISHED:
                assert end is not None, "a finished request has ended"
                trace.events.append(Event(end, "finished", i))
        trace.events.sort(key=lambda e: (e.step, EVENT_KINDS.index(e.kind)))
        rejected = [e.step for e in trace.events if e.kind in ("rejected", "aborted")]
        finished = [e.step for e in trace.events if e.kind == "finished"]
        finished_by = (
            bisect_left if self.engine.processes_late(self.workload.args) else bisect_right
        )
        pool = self.engine.engine_input(self.workload.args)[self.engine.pool_key]
        for row in self.rows or ():
            fields = dict(zip(ROW_FIELDS, row[: len(ROW_FIELDS)], strict=True))
            trace.steps.append(
                StepRecord(
                    **fields,
                    **UNREPORTED,
                    used_blocks=pool - fields["free_blocks"],
                    rejected_total=bisect_right(rejected, fields["step"]),
                    finished_total=finished_by(finished, fields["step"]),
                )
            )
        return trace

    def to_json(self, keep_steps: bool = True) -> dict:
        """The workload as the driver got it and what the engine did: one row per request
        ``[id, prompt_len, max_new_tokens, arrival_step, state ("aborted" for an abort),
        *STORED_FIELDS, stopped_by_a_length_limit, preemption steps, rejection message]``, the
        step rows (or None), the run's end."""
        if self.failure is not None:
            raise self.failure
        stored = self.engine.driver_input(self.workload)
        requests = stored.pop("requests")  # [id, prompt_len, max_new_tokens, arrival_step] each
        stored.update(
            startup_error=self.startup_error,
            end_step=self.end_step,
            iterations=self.iterations,
            steps=self.rows if keep_steps else None,
            requests=[
                [
                    *row,
                    "aborted" if row[0] in self.aborted else str(r.state),
                    *(getattr(r, name) for name in STORED_FIELDS),
                    r.output_limit < r.max_new_tokens,
                    self.preemptions[r.request_id],
                    r.reason.message if r.state is RequestState.REJECTED and r.reason else None,
                ]
                for row, r in zip(requests, self.requests.values())
            ],
        )
        return stored

    @classmethod
    def from_json(cls, engine: RealEngine, stored: dict) -> RunRecord:
        """The record :meth:`to_json` wrote."""
        rows, prefixes = stored["requests"], stored.get("prefixes", {})
        requests = []
        for request_id, prompt_len, max_new_tokens, arrival_step, *_ in rows:
            per_hash, hashes = prefixes.get(request_id, (MOONCAKE_TOKENS_PER_HASH, ()))
            requests.append(
                Request(
                    request_id,
                    prompt_len,
                    max_new_tokens,
                    arrival_step,
                    prefix_hashes=tuple(hashes),
                    tokens_per_hash=per_hash,
                )
            )
        workload = PeerWorkload(
            stored["name"], engine.args_from_input(stored["engine"]), requests, stored["max_steps"]
        )
        record = cls(engine, workload)
        startup_error, steps = stored["startup_error"], stored["steps"]
        if startup_error is not None:
            _text(stored, "startup_error")
        if steps is not None and (not isinstance(steps, list) or not all(map(_is_row, steps))):
            raise ValueError(f"steps must be null or rows of counts, got {steps!r:.80}")
        record.startup_error, record.rows = startup_error, steps
        record.end_step, record.iterations = (
            _count(stored, "end_step"),
            _count(stored, "iterations"),
        )
        record.ended = True
        for row in rows:
            _check_stored_row(row)
            request = record.requests[row[0]]
            state, limited, preemptions, reason = row[4], row[9], row[10], row[11]
            request.state = RequestState.REJECTED if state == "aborted" else RequestState(state)
            if state == "aborted":
                record.aborted.add(request.request_id)
            for name, value in zip(STORED_FIELDS, row[5:9], strict=True):
                setattr(request, name, value)
            if limited:
                request.output_limit = request.num_generated
            record.preemptions[request.request_id] = preemptions
            request.num_recomputes = len(preemptions)
            if reason is not None:
                request.reason = Reason(Cause.REJECTED_BY_ENGINE, message=reason)
        return record


__all__ = ["EngineProcessError", "EngineUnavailable", "RealEngine", "RunRecord", "args_input"]
