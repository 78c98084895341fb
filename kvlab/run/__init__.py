"""Runs: the executor loop around a scheduler, its records, the workloads fed to it, and ranks
over torch.distributed. Imports :mod:`kvlab.core` and :mod:`kvlab.sched`.

Reading order: ``simulation`` (``simulate`` and ``Engine``: arrivals, the executor's queue, one
iteration a step) -> ``trace`` (per-step records and events) -> ``workload`` (seeded generators
and Azure's public trace) -> ``distributed`` (per-rank budgets, the MIN all-reduce, routing,
failure across ranks; ``monitor``, the ranks' shared record, and ``signals``, no rank
outliving its parent) -> ``scenarios`` (the YAML files that describe such runs). ``progress``
draws the bars of anything slow.
"""
