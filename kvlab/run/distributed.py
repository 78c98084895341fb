"""The 16-GPU deployment of TensorRT-LLM issue #21470 in miniature: :func:`run_ranks` runs the
ranks as processes (gloo on CPU, nccl with one GPU per rank) or, ``in_process=True``, as threads
meeting at a barrier, with the same per-rank results."""

from __future__ import annotations

import time

import torch

from kvlab.core.checks import check_choice, check_float, check_instance
from kvlab.run.comm import CollectiveFailed, ThreadComm, in_threads
from kvlab.run.progress import rank_progress
from kvlab.run.rank import RankResult, RankRunner, rank_loop
from kvlab.run.rank_config import RunConfig
from kvlab.run.run_result import DistributedResult, not_routed
from kvlab.run.supervisor import run_processes

BACKENDS = ("gloo", "nccl")


def run_ranks(
    config: RunConfig,
    *,
    backend: str = "gloo",
    in_process: bool = False,
    timeout_s: float = 60.0,
    deadline_s: float | None = None,
    progress: bool = True,
) -> DistributedResult:
    """Run every rank of ``config`` and return their results. ``timeout_s``: seconds without
    progress after which the ranks are hung (in-process: a collective that waits that long);
    ``deadline_s``: the whole run's limit (process mode). ``progress`` shows a bar of lockstep
    iterations on runs longer than a second."""
    check_instance("config", config, RunConfig)
    check_choice("backend", backend, BACKENDS)
    check_instance("in_process", in_process, bool)
    check_float("timeout_s", timeout_s, low=1.0, high=24 * 3600.0)  # the watchdog samples at 0.2 s
    check_instance("progress", progress, bool)
    if deadline_s is not None:
        check_float("deadline_s", deadline_s, low=0.0, high=7 * 24 * 3600.0, low_open=True)
        if in_process:
            raise ValueError(
                "deadline_s needs the process mode (in_process=False): threads "
                "cannot be stopped from outside"
            )
    if in_process and config.fault is not None:
        raise ValueError(
            "fault needs the process mode (in_process=False): a thread cannot die alone"
        )
    if in_process:
        return _run_threads(config, timeout_s, progress)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend == "nccl" and gpus < config.world_size:
        raise ValueError(
            f"backend='nccl' needs one CUDA GPU per rank: ranks={config.world_size}, "
            f"torch sees {gpus} GPU(s); use backend='gloo'"
        )
    return run_processes(config, backend, timeout_s, deadline_s, progress)


def _run_threads(config: RunConfig, timeout_s: float, progress: bool) -> DistributedResult:
    start = time.monotonic()
    bar = rank_progress(progress, config.world_size)
    comm = ThreadComm(config.world_size, timeout_s, on_gather=None if bar is None else bar.update)
    results: list[RankResult] = []

    def run(rank: int) -> None:
        results.append(rank_loop(RankRunner(rank, config), comm.for_rank(rank)))

    try:
        in_threads(comm, run)
    except CollectiveFailed as exc:  # no rank failed on its own: a collective timed out
        raise TimeoutError(f"{exc} (timeout_s={timeout_s})") from None
    finally:
        if bar is not None:
            bar.close()
    ranks = tuple(sorted(results, key=lambda r: r.rank))
    return DistributedResult(
        ranks=ranks,
        mode="in-process",
        backend=None,
        policy=config.policy,
        wall_s=time.monotonic() - start,
        startup_s=0.0,
        timeout_s=timeout_s,
        not_routed=not_routed(config, ranks),
    )
