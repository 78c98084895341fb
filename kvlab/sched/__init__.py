"""Scheduling: one pass of TensorRT-LLM's ``KVCacheV2Scheduler`` at a time (``scheduler``, with
``context_plan``, ``make_room``, ``prefix_skip``, ``residency`` and ``deadlock``),
its ``admission`` policies, and vLLM's and SGLang's own loops beside it (``vllm``, ``sglang``,
``sglang_prefill``). Imports only :mod:`kvlab.core`.
"""
