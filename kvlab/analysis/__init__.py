"""Analyses: what the runs mean, in closed form and in tables. Imports the layers below.

Reading order: ``presets`` (the seed geometry, the outcome names and the one classifier) ->
``repro`` (the 4 MiB single-GPU experiment) -> ``compare`` (one workload under every policy) ->
``phase`` (the phase diagram's closed forms) -> ``rank_plan`` (a multi-rank run without running
it) -> ``mamba_residency`` (notebook 05's arithmetic) -> ``measurements`` (timings on a real
device) -> ``models``, ``model_config_checks`` (a real model's geometry, its config checked),
``gpus``, ``deployment_spec``, ``v1_capacity``, ``hybrid_split``, ``context_ranges``,
``deployment`` (the preflight plan) -> ``peer_conformance`` (the workloads kvlab's peers are held
to) -> ``reuse`` (a trace's prefix reuse, and replays with it on and off).
"""
