"""Scheduling: one pass of TensorRT-LLM's ``KVCacheV2Scheduler`` at a time, and the policies
passed into it. Imports only :mod:`kvlab.core`.

Reading order: ``scheduler`` (the phases, the budget, eviction, recompute pause, the stall
counter) -> ``admission`` (what to check at arrival and how to make room: none, capacity, the
vLLM and SGLang styles) -> ``policies`` (the one table naming each admission policy with a
page-index width policy).
"""
