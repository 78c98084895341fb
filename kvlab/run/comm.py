"""The collectives the ranks use, in two kinds with the same methods: :class:`TorchComm`
(torch.distributed, gloo or nccl) and :class:`ThreadComm` (ranks that are threads of one
process, meeting at a barrier); :func:`in_threads` runs one target per thread rank."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist


class CollectiveFailed(RuntimeError):
    """A collective did not complete: a peer died, hung past the timeout, or failed."""


class TorchComm:
    """One rank's torch.distributed collectives: MIN all-reduce of an int, all_gather of a few
    ints (one int64 tensor) and of a picklable object (only to spread an error's text)."""

    def __init__(self, device: torch.device):
        self.device = device

    def _run(self, name: str, collective: Callable[[], object]) -> None:
        try:
            collective()
        except RuntimeError as exc:
            raise CollectiveFailed(f"{name} failed: {str(exc).splitlines()[0]}") from exc

    def all_reduce_min(self, value: int) -> int:
        tensor = torch.tensor([value], dtype=torch.int64, device=self.device)
        self._run("all_reduce(MIN)", lambda: dist.all_reduce(tensor, op=dist.ReduceOp.MIN))
        return int(tensor.item())

    def all_gather_ints(self, values: Sequence[int]) -> list[list[int]]:
        tensor = torch.tensor(list(values), dtype=torch.int64, device=self.device)
        gathered = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
        self._run("all_gather", lambda: dist.all_gather(gathered, tensor))
        return [t.tolist() for t in gathered]

    def all_gather(self, obj: object) -> list[object]:
        gathered: list[object] = [None] * dist.get_world_size()
        self._run("all_gather", lambda: dist.all_gather_object(gathered, obj))
        return gathered


class ThreadComm:
    """The same collectives for thread ranks; ``for_rank(r)`` is rank r's handle on the shared
    slots and barrier. A barrier that times out or is aborted (a rank failed) raises
    CollectiveFailed in every waiting rank."""

    def __init__(
        self, world_size: int, timeout_s: float, on_gather: Callable[[], object] | None = None
    ):
        self.world_size, self.rank = world_size, 0
        self._slots: list[Any] = [None] * world_size
        self._barrier = threading.Barrier(world_size, timeout=timeout_s)
        self._on_gather = on_gather

    def for_rank(self, rank: int) -> ThreadComm:
        handle = copy.copy(self)
        handle.rank = rank
        return handle

    def abort(self) -> None:
        self._barrier.abort()

    def all_reduce_min(self, value: int) -> int:
        return int(min(self.all_gather(value)))

    def all_gather_ints(self, values: Sequence[int]) -> list[list[int]]:
        return self.all_gather([int(v) for v in values])

    def all_gather(self, obj: Any) -> list[Any]:
        self._slots[self.rank] = obj
        try:
            if self._barrier.wait() == 0 and self._on_gather is not None:
                self._on_gather()
            gathered = list(self._slots)
            self._barrier.wait()  # nobody overwrites a slot before everyone has read it
        except threading.BrokenBarrierError:
            raise CollectiveFailed(
                "the in-process ranks did not all meet at the barrier "
                "(a rank failed, or the timeout passed)"
            ) from None
        return gathered


def in_threads(comm: ThreadComm, target: Callable[[int], None]) -> None:
    """Run ``target(rank)`` for every rank of ``comm``, each in a thread, and wait for all. A
    rank that raises aborts ``comm`` (the others' collectives fail instead of waiting); a
    rank's own error is raised before the CollectiveFailed it caused elsewhere."""
    errors: list[BaseException] = []

    def run(rank: int) -> None:
        try:
            target(rank)
        except BaseException as exc:
            errors.append(exc)
            comm.abort()

    threads = [
        threading.Thread(target=run, args=(r,), name=f"kvlab-rank-{r}", daemon=True)
        for r in range(comm.world_size)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise next((e for e in errors if not isinstance(e, CollectiveFailed)), errors[0])
