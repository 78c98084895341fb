"""Scheduling: one pass of TensorRT-LLM's ``KVCacheV2Scheduler`` at a time, the policies passed
into it, and vLLM's and SGLang's own loops beside it. Imports only :mod:`kvlab.core`.

Reading order: ``base`` (what every scheduler owes the executor loop) -> ``scheduler`` (the two
phases and the stall counter) -> ``context_plan`` (the pass's budget and a context's next chunk)
-> ``make_room`` (suspend, recompute pause, preempt for pages) -> ``admission`` (what to check
at arrival) -> ``prefix_skip``, ``residency``, ``deadlock`` (the V2 loop's side features) ->
``shortcuts`` (its two speed shortcuts, behind one switch) -> ``vllm`` -> ``sglang`` ->
``sglang_prefill`` -> ``policies`` (the one table naming each policy).
"""
