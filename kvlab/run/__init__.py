"""Runs: the executor loop around a scheduler (``simulation``, ``trace``), the workloads fed to
it (``workload``), ranks over torch.distributed (``distributed``, the door, then
``rank_config``, ``rank``, ``routing``, ``comm``, ``supervisor``, ``monitor``, ``signals``,
``run_result``) and the scenario files that describe such runs (``scenario_schema``,
``scenarios``). docs/DESIGN.md holds the module map."""
