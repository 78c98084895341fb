"""Runs: the executor loop around a scheduler, its records, the workloads fed to it, and ranks
over torch.distributed. Imports :mod:`kvlab.core` and :mod:`kvlab.sched`.

Reading order: ``simulation`` (``simulate`` and ``Engine``: arrivals, the executor's queue, one
iteration a step) -> ``trace`` (per-step records and events) -> ``workload`` (seeded generators
and Azure's and Mooncake's public traces) -> ``distributed`` (``run_ranks``, the door to the
ranks), then ``rank_config`` (what every rank needs), ``rank`` (one rank: budget, MIN
all-reduce, lockstep iterations), ``routing``, ``comm`` (the collectives), ``supervisor`` (the
processes, the watchdog; ``monitor``, the ranks' shared record, and ``signals``, no rank
outliving its parent) and ``run_result`` (how a run ended) -> ``scenario_fields`` (the field
specs) and ``scenarios`` (the YAML files that describe such runs). ``progress`` draws the bars of anything slow.
"""
