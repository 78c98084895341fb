"""Integer arithmetic every layer shares: ceiling division (TensorRT-LLM's ``common::ceilDiv``,
cpp/include/tensorrt_llm/common/cudaUtils.h), exact on ints of any size, unlike
``math.ceil(a / b)``, which goes through a float."""

from __future__ import annotations

from typing import TYPE_CHECKING, overload

if TYPE_CHECKING:
    import numpy as np


@overload
def div_ceil(a: int, b: int) -> int: ...
@overload
def div_ceil(a: np.ndarray, b: int) -> np.ndarray: ...
def div_ceil(a: int | np.ndarray, b: int) -> int | np.ndarray:
    """ceil(a / b) for ints, or element by element for an int array; b > 0."""
    return -(-a // b)
