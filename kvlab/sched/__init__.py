"""Scheduling: one pass of TensorRT-LLM's ``KVCacheV2Scheduler`` at a time, the policies passed
into it, and vLLM's and SGLang's own loops beside it. Imports only :mod:`kvlab.core`.

Reading order: ``base`` (what every scheduler owes the executor loop: submit, finish, the state
counts, the invariants) -> ``scheduler`` (the phases, eviction, recompute pause, the stall
counter) -> ``context_plan`` (the pass's budget, the plan of a context's next chunk, the certain
refusal built on it) -> ``admission`` (what to check at arrival: the front door, none, capacity)
-> ``vllm`` (vLLM 0.34.0's own scheduling loop, start-up and front door, held to the real one)
-> ``sglang`` (the same for SGLang 0.5.23) -> ``sglang_prefill`` (its prefill adder and
new-token ratio) -> ``policies`` (the one table naming each policy).
"""
