"""Bytes per token, per block (page) and per layer for a KV cache.

Mirrors ``KVCacheManagerV2.get_layer_bytes_per_token``
(tensorrt_llm/_torch/pyexecutor/kv_cache/kv_cache_manager_v2.py), docs/REFERENCE.md §1:
``kv_factor * ceil(num_kv_heads / tp_size) * head_dim * dtype_bytes`` per layer and token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from kvlab.core.arith import div_ceil
from kvlab.core.checks import check_bools, check_choice, check_int, store_checked, store_param

#: Bytes per element of each KV dtype. NVFP4 packs two elements per byte and adds one
#: fp8 scale byte per 16 elements (handled in ``element_bytes``).
DTYPE_BYTES = {
    "float32": Fraction(4),
    "float16": Fraction(2),
    "bfloat16": Fraction(2),
    "fp8": Fraction(1),
    "nvfp4": Fraction(1, 2),
}
NVFP4_SCALE_BLOCK = 16  # elements sharing one fp8 scale byte


def element_bytes(dtype: str, num_elements: int) -> int:
    """Exact bytes that ``num_elements`` values of ``dtype`` take, scale bytes included."""
    payload = DTYPE_BYTES[dtype] * num_elements
    if dtype == "nvfp4":
        payload += num_elements // NVFP4_SCALE_BLOCK
    if payload.denominator != 1:
        raise ValueError(f"{num_elements} elements of {dtype} do not fill whole bytes")
    return int(payload)


@dataclass(frozen=True)
class KVGeometry:
    """Shape of a full-attention KV cache on one rank. kv_factor is 2 (K and V) or 1 (MLA keeps
    only the compressed K); ``attention_dp=True`` leaves the heads unsplit (tp 1), as upstream."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: str = "float16"
    tokens_per_block: int = 32
    tp_size: int = 1
    kv_factor: int = 2
    attention_dp: bool = False

    def __post_init__(self) -> None:
        for name, high in (("num_layers", 4096), ("num_kv_heads", 4096), ("head_dim", 65536)):
            store_checked(self, name, check_int, low=1, high=high)
        check_choice("dtype", self.dtype, DTYPE_BYTES)
        store_param(self, "tokens_per_block")
        store_checked(self, "tp_size", check_int, low=1, high=4096)
        if isinstance(self.kv_factor, bool) or not isinstance(self.kv_factor, int):
            raise TypeError(
                f"kv_factor must be the int 2 (K and V) or 1 (MLA), "
                f"got {self.kv_factor!r} ({type(self.kv_factor).__name__})"
            )
        if self.kv_factor not in (1, 2):
            raise ValueError(f"kv_factor must be 2 (K and V) or 1 (MLA), got {self.kv_factor!r}")
        check_bools(attention_dp=self.attention_dp)
        if self.dtype == "nvfp4" and self.head_dim % NVFP4_SCALE_BLOCK:
            raise ValueError(
                f"head_dim must be a multiple of {NVFP4_SCALE_BLOCK} for nvfp4, got {self.head_dim}"
            )

    @property
    def effective_tp_size(self) -> int:
        """tp_size used for the KV heads: 1 under attention data parallelism."""
        return 1 if self.attention_dp else self.tp_size

    @property
    def kv_heads_per_rank(self) -> int:
        return math.ceil(self.num_kv_heads / self.effective_tp_size)

    @property
    def layer_bytes_per_token(self) -> int:
        """One layer, one token, one rank: kv_factor * ceil(heads / tp) * head_dim * dtype bytes."""
        return self.kv_factor * self.kv_heads_per_rank * element_bytes(self.dtype, self.head_dim)

    @property
    def bytes_per_token(self) -> int:
        """All layers of one token on one rank (the seed's 2 x 2 x 2 x 128 x 2 = 2048)."""
        return self.num_layers * self.layer_bytes_per_token

    @property
    def bytes_per_block(self) -> int:
        """One page: ``bytes_per_token * tokens_per_block`` (all layers)."""
        return self.bytes_per_token * self.tokens_per_block

    @property
    def pool_bytes(self) -> tuple[int, ...]:
        """A page's bytes per V2 storage pool, largest first: K and V of every layer share one
        pool; NVFP4's fp8 block scales, a different buffer size, take a second
        (``get_layer_bytes_per_token`` by role, kv_cache_manager_v2.py at 00043967)."""
        if self.dtype != "nvfp4":
            return (self.bytes_per_block,)
        elements = self.num_layers * self.kv_factor * self.kv_heads_per_rank * self.head_dim
        scales = elements // NVFP4_SCALE_BLOCK * self.tokens_per_block
        return (self.bytes_per_block - scales, scales)

    def bytes_per_token_formula(self) -> str:
        """The product behind bytes_per_token, in words (the seed's arithmetic)."""
        per_element = Fraction(element_bytes(self.dtype, self.head_dim), self.head_dim)
        kv = "K and V" if self.kv_factor == 2 else "K only, MLA"
        heads = (
            f"ceil({self.num_kv_heads} / tp {self.effective_tp_size}) = {self.kv_heads_per_rank}"
            if self.effective_tp_size > 1
            else f"{self.kv_heads_per_rank}"
        )
        return (
            f"{self.num_layers} layers x {self.kv_factor} ({kv}) x {heads} KV heads x "
            f"{self.head_dim} dims x {float(per_element):g} B ({self.dtype}) = "
            f"{self.bytes_per_token:,} B"
        )

    def blocks_for_tokens(self, num_tokens: int) -> int:
        """Pages needed to hold ``num_tokens`` tokens: ceil(num_tokens / tokens_per_block)."""
        return div_ceil(check_int("num_tokens", num_tokens), self.tokens_per_block)

    def blocks_in(self, quota_bytes: int) -> int:
        """Whole pages a quota holds: floor(quota / bytes_per_block)."""
        return check_int("quota_bytes", quota_bytes) // self.bytes_per_block


#: dtypes a recurrent state (conv or SSM) may take.
STATE_DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class MambaGeometry:
    """Shape of one sequence's recurrent (Mamba / linear-attention) state on one rank: a fixed
    ``num_mamba_layers * (conv_bytes + ssm_bytes)``, split over ``tp_size`` (REFERENCE.md §5;
    ``MambaHybridCacheManagerV2._mamba_state_bytes_per_slot``, mamba_cache_manager.py)."""

    num_mamba_layers: int
    mamba_num_heads: int
    mamba_head_dim: int
    d_state: int
    n_groups: int
    d_conv: int
    conv_dtype: str = "bfloat16"
    ssm_dtype: str = "float32"
    tp_size: int = 1

    def __post_init__(self) -> None:
        store_checked(self, "num_mamba_layers", check_int, low=0, high=4096)
        for name in ("mamba_num_heads", "mamba_head_dim", "d_state", "n_groups"):
            store_checked(self, name, check_int, low=1, high=1 << 16)
        store_checked(self, "d_conv", check_int, low=2, high=1 << 10)
        check_choice("conv_dtype", self.conv_dtype, STATE_DTYPES)
        check_choice("ssm_dtype", self.ssm_dtype, STATE_DTYPES)
        store_checked(self, "tp_size", check_int, low=1, high=4096)
        for name in ("mamba_num_heads", "n_groups"):
            if getattr(self, name) % self.tp_size:
                raise ValueError(
                    f"{name}={getattr(self, name)} must be divisible by tp_size={self.tp_size}"
                )
        if self.mamba_num_heads % self.n_groups:
            raise ValueError(
                f"mamba_num_heads={self.mamba_num_heads} must be a multiple of "
                f"n_groups={self.n_groups} (each group serves whole heads)"
            )

    @property
    def conv_dim(self) -> int:
        """Conv channels per rank: (head_dim * heads + 2 * n_groups * d_state) / tp."""
        return (
            self.mamba_head_dim * self.mamba_num_heads + 2 * self.n_groups * self.d_state
        ) // self.tp_size

    @property
    def conv_bytes(self) -> int:
        """One layer's conv state: conv_dim * (d_conv - 1) elements of conv_dtype."""
        return element_bytes(self.conv_dtype, self.conv_dim * (self.d_conv - 1))

    @property
    def ssm_bytes(self) -> int:
        """One layer's SSM state: (heads / tp) * head_dim * d_state elements of ssm_dtype."""
        return element_bytes(
            self.ssm_dtype,
            (self.mamba_num_heads // self.tp_size) * self.mamba_head_dim * self.d_state,
        )

    @property
    def bytes_per_slot(self) -> int:
        """One sequence's recurrent state on this rank: layers * (conv_bytes + ssm_bytes)."""
        return self.num_mamba_layers * (self.conv_bytes + self.ssm_bytes)


def qwen3_5_27b_mamba(
    ssm_dtype: str = "float32", conv_dtype: str = "bfloat16", tp_size: int = 1
) -> MambaGeometry:
    """Qwen3.5-27B's 48 linear-attention layers from its published config (docs/REFERENCE.md §5):
    48 value heads of 128, key head dim 128 (d_state), 16 key heads (n_groups), kernel 4.
    The config's mamba_ssm_dtype is float32; the PR's 37.5 GiB implies bfloat16."""
    return MambaGeometry(48, 48, 128, 128, 16, 4, conv_dtype, ssm_dtype, tp_size)


def qwen3_5_27b_attention(tokens_per_block: int = 32, tp_size: int = 1) -> KVGeometry:
    """Qwen3.5-27B's 16 full-attention layers (full_attention_interval 4 of 64): 4 KV heads of
    256, bf16."""
    return KVGeometry(
        num_layers=16,
        num_kv_heads=4,
        head_dim=256,
        dtype="bfloat16",
        tokens_per_block=tokens_per_block,
        tp_size=tp_size,
    )
