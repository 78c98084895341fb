"""Scheduling: one pass of TensorRT-LLM's ``KVCacheV2Scheduler`` at a time, the policies passed
into it, and vLLM's and SGLang's own loops beside it. Imports only :mod:`kvlab.core`.

Reading order: ``base`` (what every scheduler owes the executor loop: submit, finish, the state
counts, the invariants) -> ``scheduler`` (the phases, the budget, eviction, recompute pause, the
stall counter) -> ``admission`` (what to check at arrival: none, capacity) -> ``vllm`` (vLLM
0.34.0's own scheduling loop, start-up and front door, held to the real one) -> ``sglang`` (the
same for SGLang 0.5.23) -> ``policies`` (the one table naming each policy).
"""
