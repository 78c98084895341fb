"""Integer arithmetic every layer shares: ceiling division (TensorRT-LLM's ``common::ceilDiv``,
cpp/include/tensorrt_llm/common/cudaUtils.h), exact on ints of any size, unlike
``math.ceil(a / b)``, which goes through a float."""

from __future__ import annotations


def div_ceil(a: int, b: int) -> int:
    """ceil(a / b) for ints, b > 0."""
    return -(-a // b)
