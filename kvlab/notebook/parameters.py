"""Each notebook's parameter check, run in its first code cell on the values papermill (or
``kvlab walkthrough -p``) passes: each error names the parameter, its value and the accepted
range, integer bounds from :data:`kvlab.core.checks.BOUNDS`. Notebook 01's are checked by
:func:`kvlab.run.rank_config.scenario_config`."""

from __future__ import annotations

from pathlib import Path

from kvlab.analysis.compare import EngineConfig
from kvlab.analysis.mamba_residency import MAMBA_SSM_DTYPES, PR_MAX_BATCH_SIZE
from kvlab.core.checks import MAX_COUNT, check_choice, check_float, check_int, check_param
from kvlab.core.page_index import WIDTH_POLICIES
from kvlab.sched.deadlock import DEFAULT_STALL_LIMIT


def check_bool(name: str, value) -> None:
    """TypeError naming ``name`` unless ``value`` is True or False (``SMOKE``: a shorter run)."""
    if not isinstance(value, bool):
        raise TypeError(
            f"{name} must be a bool (True or False), got {value!r} ({type(value).__name__})"
        )


def check_pool_and_context(pool_mib, context) -> None:
    """The pool (MiB) and the context (tokens) several notebooks and panels take."""
    check_float("pool_mib", pool_mib, low=0.0, high=1 << 20, low_open=True)
    check_int("context", context, low=1, high=1 << 30)


def check_repro_parameters(
    pool_mib,
    context,
    tokens_per_block=32,
    policy: str = "clamped",
    SMOKE=False,
    retry_tokens=32,
    max_batch_size=1,
) -> None:
    """Notebooks 02 and 03, and the repro panel: one resize of one request on a small pool."""
    check_pool_and_context(pool_mib, context)
    check_param("tokens_per_block", tokens_per_block)
    check_choice("policy", policy, WIDTH_POLICIES)
    check_int("retry_tokens", retry_tokens, low=1, high=1 << 30)
    check_param("max_batch_size", max_batch_size)
    check_bool("SMOKE", SMOKE)


def check_admission_parameters(
    *,
    pool_mib=4.0,
    context=8192,
    num_small=6,
    num_requests=150,
    arrival_rate=0.05,
    seed=0,
    stall_limit=DEFAULT_STALL_LIMIT,
    grid=64,
    trace_minutes=60.0,
    seconds_per_iteration=0.05,
    live_engines=False,
    mooncake_minutes=60.0,
    SMOKE=False,
) -> None:
    """Notebook 04: the engines under each policy, the phase diagram, the Azure and Mooncake
    hours."""
    check_pool_and_context(pool_mib, context)
    check_int("num_small", num_small, low=0, high=10_000)
    check_int("num_requests", num_requests, low=1, high=1_000_000)
    check_float("arrival_rate", arrival_rate, low=0.0, high=1e6, low_open=True)
    check_int("seed", seed, low=0, high=2**63 - 1)
    check_param("stall_limit", stall_limit)
    check_int("grid", grid, low=2, high=512)
    check_float("trace_minutes", trace_minutes, low=0.0, high=60.0, low_open=True)
    check_float("seconds_per_iteration", seconds_per_iteration, low=0.001, high=10.0)
    check_float("mooncake_minutes", mooncake_minutes, low=0.0, high=60.0, low_open=True)
    check_bool("live_engines", live_engines)
    check_bool("SMOKE", SMOKE)
    EngineConfig(pool_mib=pool_mib, max_seq_len=context, stall_limit=stall_limit)  # holds a page


def check_mamba_parameters(
    *, quota_gib=24.86, max_batch_size=PR_MAX_BATCH_SIZE, ssm_dtype="bfloat16", SMOKE=False
) -> None:
    """Notebook 05: Qwen3.5-27B's recurrent-state slots against a quota."""
    check_float("quota_gib", quota_gib, low=0.0, high=1024.0, low_open=True)
    check_param("max_batch_size", max_batch_size)
    check_choice("ssm_dtype", ssm_dtype, MAMBA_SSM_DTYPES)
    check_bool("SMOKE", SMOKE)


def check_plan_parameters(
    *,
    model="llama-3.1-70b",
    gpu="h100-80gb",
    weights_gib=None,
    tp_size=4,
    max_seq_len=131072,
    max_batch_size=256,
    chunked_prefill=True,
    manager="auto",
    traffic="azure-conv",
    traffic_requests=2000,
    SMOKE=False,
) -> None:
    """Notebook 06: your deployment, planned (its Deployment checks the rest), and the trace
    its section 7 replays on it."""
    from kvlab.analysis.deployment import Deployment
    from kvlab.analysis.gpus import GPUS
    from kvlab.analysis.models import load_model, model_names

    check_choice("model", model, model_names())
    check_choice("gpu", gpu, GPUS)
    traffic_file(traffic)
    check_int("traffic_requests", traffic_requests, low=1, high=MAX_COUNT)
    check_bool("SMOKE", SMOKE)
    Deployment(
        model=load_model(model),
        gpu_gib=GPUS[gpu].gib,
        weights_gib=weights_gib,
        tp_size=tp_size,
        max_seq_len=max_seq_len,
        max_batch_size=max_batch_size,
        chunked_prefill=chunked_prefill,
        manager=manager,
    )


def traffic_traces() -> dict[str, Path]:
    """The traces of data/traces/ by the names notebook 06's ``traffic`` takes: azure-conv,
    azure-code, mooncake-conversation, mooncake-synthetic (kvlab.run.workload names the
    files)."""
    from kvlab.run.workload import AZURE_TRACES, MOONCAKE_FOLDER, MOONCAKE_TRACES, TRACE_DIR

    return {
        **{f"azure-{name}": TRACE_DIR / file for name, file in AZURE_TRACES.items()},
        **{
            f"mooncake-{name}": TRACE_DIR / MOONCAKE_FOLDER / file
            for name, file in MOONCAKE_TRACES.items()
        },
    }


def traffic_file(traffic) -> Path:
    """The trace file notebook 06's ``traffic`` names: one of :func:`traffic_traces`, or the
    path of a file of one's own (docs/TRACES.md's formats, checked row by row when replayed).
    ValueError naming the parameter and the accepted values otherwise."""
    traces = traffic_traces()
    if isinstance(traffic, str) and traffic in traces:
        return traces[traffic]
    if isinstance(traffic, (str, Path)) and str(traffic) and Path(traffic).is_file():
        return Path(traffic)
    raise ValueError(
        f"traffic must be one of {sorted(traces)} or the path of a trace file of your own "
        f"(docs/TRACES.md), got {traffic!r:.80}"
    )
