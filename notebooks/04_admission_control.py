# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · Admission control: "not yet" versus "never"
#
# *About 25 minutes.*
#
# Notebook 03 ended with the one-line fix turning issue #21470's `ValueError` into a refusal that
# the scheduler repeats every pass: the request starves beside others and, alone, stops the engine
# with `SchedulerDeadlock` after 1,000 passes (with chunked prefill and no tier below the GPU, a
# preemption livelock that never raises). Every engine here runs the real default tier
# configuration, the automatic host tier (`host_cache_size=None`), non-chunked (but for the real
# traffic of sections 7 and 8, which chunks as #21470's deployment did); notebook 03 §8b shows these
# workloads end the same way without it. Block reuse (prefix caching) is on, as upstream's default;
# sections 1 to 7 draw prompts that share no prefix, so it changes none of their outcomes, and
# section 8 turns to real prompts that do. The review of that fix (seed, section 5) named the real
# question: *how do we distinguish a request that cannot run yet from one that can never run?*
# PR #21720 answers it at admission. This notebook shows the distinction, runs the same workloads under
# the historical engine (both row widths) and under admission control, maps where each policy
# crashes, stalls, rejects or succeeds, measures what each costs in goodput and waiting time, and
# puts vLLM's and SGLang's own schedulers beside TensorRT-LLM's.

# %% tags=["parameters"]
pool_mib: float = 4.0  # the KV pool (quota) in MiB; the seed's 4 (64 pages of 32 tokens)
context: int = 8192  # the long request's prompt and the configured max_seq_len; the seed's 8192
num_small: int = 6  # small requests (256 + 32 tokens, one every 4 steps) beside the long one
num_requests: int = 150  # requests in the mixed seeded workload (sections 4 and 5)
arrival_rate: float = 0.05  # Poisson arrivals per scheduler step in the mixed workload
seed: int = 0  # the mixed workload's seed
stall_limit: int = 1000  # passes without progress before SchedulerDeadlock; the real _DEADLOCK_STALL_ITERS
grid: int = 64  # phase diagram resolution: grid pools x grid contexts per regime
trace_minutes: float = 60.0  # section 7 replays this much of Azure's code hour (all of it: 60)
seconds_per_iteration: float = 0.05  # section 7: one scheduler iteration in seconds of the trace's clock
live_engines: bool = False  # section 5b: run the real vLLM and SGLang now (scripts/setup.sh), not their stored runs
mooncake_minutes: float = 60.0  # section 8 replays this much of Mooncake's conversation hour (all of it: 60)
SMOKE: bool = False  # True (CI): a smaller workload, a coarser diagram, ten minutes of the trace, five of Mooncake's

# %%
import dataclasses
import textwrap

import numpy as np
import pandas as pd
from IPython.display import display

from kvlab import Request, simulate
from kvlab.analysis.compare import (EngineConfig, build_scheduler, long_and_small, not_yet_and_never,
                                    outcome_rows, outcome_table, request_timeline, run_policies,
                                    vllm_startup_error)
from kvlab.analysis.phase import PhaseSetup, phase_diagram, phase_scenario
from kvlab.analysis.presets import ENGINE_OUTCOMES, engine_outcome
from kvlab.analysis.peer_conformance import by_name, differences, sglang_workloads, vllm_workloads
from kvlab.analysis.sentences import sentence
from kvlab.analysis.shipped import (SHIPPED_ENGINES, SLICE_POOL_PAGES, caching_effect, caching_rows, conversation_slice,
                                    defaults_label, policies_label, shared_prefix_runs, shipped_runs, slice_engine,
                                    story_rows)
from kvlab.analysis.reuse import (MOONCAKE_ENGINE, replay_with_reuse, reuse_ceiling, reuse_table,
                                  shared_prefix_story)
from kvlab.backends.sglang import SGLANG
from kvlab.backends.vllm import VLLM
from kvlab.notebook import viz
from kvlab.notebook.findings import Finding, report_findings
from kvlab.core.words import counted
from kvlab.notebook.tables import table
from kvlab.notebook.parameters import check_admission_parameters
from kvlab.notebook.widgets import admission_panel, caching_panel
from kvlab.run.workload import LogNormal, azure_trace, mooncake_trace, poisson_workload
from kvlab.sched.admission import (CapacityAdmission, FITS_NOW, NEVER_FITS, TEMPORARILY_BLOCKED,
                                   demand_blocks)
from kvlab.sched.policies import PEER_POLICIES, POLICIES, TRTLLM_POLICIES

# Bad parameters stop here, with a message naming the parameter.
check_admission_parameters(pool_mib=pool_mib, context=context, num_small=num_small, num_requests=num_requests,
                 arrival_rate=arrival_rate, seed=seed, stall_limit=stall_limit, grid=grid,
                 trace_minutes=trace_minutes, seconds_per_iteration=seconds_per_iteration, live_engines=live_engines,
                 mooncake_minutes=mooncake_minutes, SMOKE=SMOKE)
if SMOKE:
    num_requests, grid, trace_minutes = min(num_requests, 60), min(grid, 24), min(trace_minutes, 10.0)
    mooncake_minutes = min(mooncake_minutes, 5.0)
engine = EngineConfig(pool_mib=pool_mib, max_seq_len=context, stall_limit=stall_limit)
IS_SEED = (pool_mib, context) == (4.0, 8192)
pd.set_option("display.max_colwidth", 120)
print(textwrap.fill(engine.describe() + (" (the seed's)" if IS_SEED else " (not the seed's: the asserts follow the "
                                         "arithmetic)"), 100))  # between words: outputs break mid-word

# %% [markdown]
# ## 1. Two reasons a resize returns False
#
# The scheduler is *try and see* (docs/REFERENCE.md §4): it calls resize and reacts to `False`. But a
# `False` can mean two different things:
#
# - **temporary pressure** — the request fits the pool's *total* capacity, but not enough pages are
#   *free* right now. Waiting helps: pages come back as other requests finish.
# - **permanent infeasibility** — the request needs more pages than the pool *has*. Waiting cannot
#   help; it will never run.
#
# PR #21720 classifies each request at admission from its total demand (prompt + `max_new_tokens`
# pages): *fits now*, *temporarily blocked*, or *never fits* — and only the last is rejected, with the
# numbers. kvlab records a rejection's reason as a cause and its numbers (`Reason`: the `cause`
# column); the `reason` column is the sentence `kvlab.analysis.sentences` writes from them. "hog"
# takes three quarters of this pool for a while; beside it, the table classifies three arrivals:
# "tiny" (one page: fits now), "later" (half the pool: it fits alone, not beside "hog") and "never"
# (more than all of it). The runs below use "hog", "later" and "never".

# %%
trio = not_yet_and_never(engine)
manager = engine.manager("clamped")
hog = trio[0]
manager.create_cache(hog.request_id).resize(hog.max_total_tokens)  # "hog" holds its pages
capacity = CapacityAdmission()
rows = []
for request in [Request("tiny", 31, 1)] + trio[1:]:
    verdict, reason = capacity.classify(request, manager)
    rows.append(dict(request=request.request_id, prompt=request.prompt_len, new=request.max_new_tokens,
                     demand_pages=demand_blocks(request, manager), free_pages=manager.free_blocks,
                     pool_pages=manager.total_blocks, verdict=verdict,
                     cause=reason.cause if reason else "", reason=sentence(reason)))
classes = pd.DataFrame(rows).set_index("request")
display(table(classes))
assert list(classes.verdict) == [FITS_NOW, TEMPORARILY_BLOCKED, NEVER_FITS]
assert classes.loc["never", "reason"].startswith(
    f"Request requires {classes.loc['never', 'demand_pages']} KV cache blocks to complete, which exceeds "
    f"the total capacity of {engine.total_blocks} blocks")

# %% [markdown]
# The same three requests through the engine, under the historical path with either row width
# and under admission control. Under "capacity", "later" waits for "hog" to finish and then runs
# (not yet); "never" is rejected the step it arrives (never). Without admission control "never"
# either crashes the engine (clamped row: it takes "hog" and "later" down with it) or is refused
# every pass until the stall detector fires (configured row).

# %%
trio_runs = run_policies(trio, TRTLLM_POLICIES, engine)
display(table(outcome_table(trio_runs)[["outcome", "finished", "rejected", "unfinished", "steps", "error", "reasons"]]))


def when(r):
    """When a request arrived, started and ended ("never started" where it did not)."""
    started = "never started" if r["started"] is None else f"started {r['started']:,}"
    return f"arrived {r['arrival']:,}, {started}" + ("" if r["ended"] is None else f", ended {r['ended']:,}")


for policy, result in trio_runs.items():
    print(textwrap.fill(f"{policy:16} " + "; ".join(f"{r['request_id']}: {r['status']} ({when(r)})"
                                                    for r in request_timeline(result)), 100, subsequent_indent=" " * 17))
later = trio_runs["capacity"].requests["later"]
assert trio_runs["capacity"].status == {"hog": "finished", "later": "finished", "never": "rejected"}
assert later.first_scheduled_step > later.arrival_step  # not yet: it waited for pages ...
assert later.first_scheduled_step >= trio_runs["capacity"].requests["hog"].end_step  # ... until "hog" left
expected_none = {"none/clamped": "crash" if demand_blocks(trio[2], manager) > manager.max_blocks_per_seq else "stall",
                 "none/configured": "stall"}
assert {p: engine_outcome(trio_runs[p]) for p in expected_none} == expected_none

# %% [markdown]
# ## 2. The same workload under each regime: crash, stall, clean rejection
#
# The long request of the seed (`context` tokens) and `num_small` small ones arriving every 4
# steps, on the same pool. Three regimes of TensorRT-LLM: `none/clamped` (the code of
# issue #21470), `none/configured` (the one-line fix), `capacity` (PR #21720).

# %%
workload = long_and_small(context, num_small=num_small)
runs = run_policies(workload, TRTLLM_POLICIES, engine)
beside_table = outcome_table(runs)
display(table(beside_table[["outcome", "finished", "rejected", "unfinished", "steps", "max_stalled_passes", "error", "reasons"]]))
for policy, result in runs.items():
    viz.show(viz.scheduler_timeline_figure(result, stall_limit=stall_limit, title=f"{policy}: the long request "
                                           f"beside {num_small} small ones", subtitle=policies_label([policy], engine)))

# %%
long_pages = demand_blocks(workload[0], manager)
small = [r.request_id for r in workload[1:]]
if long_pages > engine.total_blocks:  # the long request can never fit this pool
    clamped = runs["none/clamped"]
    width = engine.manager("clamped").max_blocks_per_seq
    first_pages = -(-context // engine.geometry.tokens_per_block)
    assert beside_table.loc["none/clamped", "outcome"] == ("crash" if first_pages > width else "stall")
    assert beside_table.loc["none/configured", "outcome"] == "stall"     # starvation, then the deadlock
    assert runs["none/configured"].status["long"] == "waiting"
    assert all(runs["none/configured"].status[r] == "finished" for r in small)
    assert beside_table.loc["capacity", "outcome"] == "reject"
    assert runs["capacity"].status["long"] == "rejected"          # only the request that never fits
    assert all(runs["capacity"].status[r] == "finished" for r in small)   # everything else finishes
    assert beside_table.loc["capacity", "max_stalled_passes"] == 0
else:
    assert set(beside_table.outcome) == {"ok"}

# %% [markdown]
# ## 3. The phase diagram: pool size × context length
#
# One request alone (`context` tokens + 16 new), every pool from one page up and every context
# length, configured max_seq_len fixed at `context`. Each cell is the verdict of
# `kvlab.analysis.phase.phase_verdicts`, in closed form: the native resize checks the row before the pool
# (docs/REFERENCE.md §3), so the first limit the request's pages cross decides — past the row is a
# crash, past the pool a stall. Admission control replaces both regions with a clean rejection.
# The closed forms are not taken on trust: `tests/analysis/test_phase.py` checks a random sample of points
# against full `simulate` runs for every regime (and a few are checked again below).

# %%
tpb = engine.geometry.tokens_per_block
pool_blocks = np.unique(np.geomspace(1, 4096, grid).astype(int))
context_lens = np.unique(np.geomspace(32, 131072, grid).astype(int))
setup = PhaseSetup(max_seq_len=context, max_new_tokens=16)
diagram = phase_diagram(pool_blocks, context_lens, setup=setup)
viz.show(viz.phase_diagram_figure(pool_blocks, context_lens, diagram, bytes_per_block=engine.geometry.bytes_per_block,
                                  mark=(engine.total_blocks, context),
                                  subtitle=f"one request of context + 16 tokens, configured max_seq_len {context:,}; "
                                           f"{len(pool_blocks)} x {len(context_lens)} points per regime"))
counts = pd.DataFrame({regime: {v: int((grid_ == i).sum()) for i, v in enumerate(ENGINE_OUTCOMES)}
                       for regime, grid_ in diagram.items()})
display(table(counts))
assert counts.loc[["stall", "crash"], "capacity"].sum() == 0  # admission control never stalls or crashes
assert (diagram["none/clamped"] == ENGINE_OUTCOMES.index("ok")).sum() == (diagram["capacity"] == ENGINE_OUTCOMES.index("ok")).sum()
checks = [(engine.total_blocks, context), (int(pool_blocks[-1]), int(context_lens[0])),
          (int(pool_blocks[len(pool_blocks) // 2]), 4096)]
for pool_point, context_point in checks:  # a few points again, against full simulations
    for regime in TRTLLM_POLICIES:
        sched, requests = phase_scenario(pool_point, context_point, regime, setup)
        closed = ENGINE_OUTCOMES[phase_diagram([pool_point], [context_point], [regime], setup)[regime][0, 0]]
        assert engine_outcome(simulate(sched, requests, max_steps=4000)) == closed, (pool_point, context_point, regime)
seed_point = {regime: ENGINE_OUTCOMES[phase_diagram([engine.total_blocks], [context], [regime], setup)[regime][0, 0]]
              for regime in TRTLLM_POLICIES}
print("this engine's point:", seed_point)
if IS_SEED:
    assert seed_point == {"none/clamped": "crash", "none/configured": "stall", "capacity": "reject"}

# %% [markdown]
# Above `context` (the configured max_seq_len) the configured row is too short as well, so the
# one-line fix still crashes there: the wider row only moves the crash boundary from what the
# pool holds to what the engine was configured for. Under "capacity" everything that is not green
# is blue.
#
# ## 4. What it costs: goodput and waiting time under a mixed workload
#
# A seeded Poisson workload (`kvlab.run.workload`): log-normal prompts (median 256, up to 8,192 tokens)
# and outputs (median 64), a few of which can never fit this pool. Goodput counts the tokens of
# finished requests per scheduler pass; waiting time is arrival to first scheduled step, over the
# requests that started (a starving request never does — see "unfinished"); queueing time is
# arrival to the step the executor handed the request to the scheduler. As in `PyExecutor`, at
# most `max_num_active_requests` (here the engine's max_batch_size, 4) requests are active; the
# rest wait in the executor's queue. Under the one-line fix a request that can never fit keeps
# its active slot for good, so once such requests fill the active set, the requests queued behind
# them never start either.

# %%
mixed = poisson_workload(num_requests, rate=arrival_rate, prompt_len=LogNormal(256, 1.0, 16, 8192),
                         max_new_tokens=LogNormal(64, 0.8, 1, 512), seed=seed)
never = sorted(r.request_id for r in mixed if demand_blocks(r, manager) > engine.total_blocks)
mixed_runs = run_policies(mixed, tuple(POLICIES), engine, max_steps=100_000)
mixed_rows = outcome_rows(mixed_runs)
mixed_table = outcome_table(mixed_runs)
print(f"{len(mixed):,} requests, {len(never):,} of them can never fit {engine.total_blocks:,} pages: {never}")
display(table(mixed_table.loc[list(TRTLLM_POLICIES), ["outcome", "finished", "rejected", "unfinished", "steps",
                                                 "goodput_tokens_per_step", "mean_wait_steps",
                                                 "mean_queue_steps", "preemptions"]]))
viz.show(viz.policy_bars_figure([r for r in mixed_rows if r["policy"] in TRTLLM_POLICIES],
                                title="TensorRT-LLM's regimes on a mixed workload",
                                subtitle=policies_label(TRTLLM_POLICIES, engine)))

# %%
cap = mixed_table.loc["capacity"]
assert sorted(mixed_runs["capacity"].ids_with_status("rejected")) == never  # exactly the ones that never fit
assert cap.unfinished == 0 and cap.finished == len(mixed) - len(never)      # and everything else finishes
if never:
    assert mixed_table.loc["none/configured", "outcome"] == "stall"
    stuck = set(mixed_runs["none/configured"].ids_with_status("waiting"))
    assert set(never) <= stuck  # they starve, then the deadlock; requests queued behind them too
    assert mixed_table.loc["none/configured", "unfinished"] == len(stuck)
    assert cap.goodput_tokens_per_step > mixed_table.loc["none/configured", "goodput_tokens_per_step"]
    assert mixed_table.loc["none/clamped", "finished"] < cap.finished      # the crash loses everyone after it

# %% [markdown]
# ## 5. The peers, side by side
#
# The same workload under the peers: kvlab's models of vLLM 0.34.0's and SGLang 0.5.23's own
# schedulers (`kvlab.sched.vllm`, `kvlab.sched.sglang`), each held to the real one request by
# request (section 5b and docs/CONFORMANCE.md). vLLM checks capacity at **start-up**: with the configured
# max length it refuses to start at all — the message below. Its estimate is the pool less one
# block: vLLM keeps block 0 back as its *null block*, never handed to a request. An operator then
# sets `max_model_len` to that estimate, which is the engine run here: it rejects a prompt that
# reaches that length at the door, admits a waiting prompt only when the whole of it fits the free
# blocks, admits nothing in a step that preempted, and preempts by recompute, the last admitted
# first, back to the head of the queue. SGLang checks a prompt twice at the door: against the
# model's context length (the configured max_seq_len here: the prompt, and the prompt with its
# max_new_tokens, must stay under it), and against the smaller of that length and the pool, less
# six tokens (a prompt that reaches it is turned away by the next prefill); it clips each
# request's output to what the pool holds beside its prompt. It admits a prompt while it fits beside a guess of what every
# running request will still write: a share of their remaining output, the *new-token ratio*,
# 0.7 at first and decaying step by step. When a decode step finds no room, it retracts the
# request with the fewest output tokens to the back of the queue (to recompute later) and raises
# the ratio again.

# %%
startup = vllm_startup_error(engine)
print(textwrap.fill(f"vLLM at start-up: {startup or 'starts'}", 100, break_on_hyphens=False))
peers = mixed_table.loc[["none/clamped", "none/configured", "capacity", *PEER_POLICIES],
                        ["outcome", "finished", "rejected", "unfinished", "goodput_tokens_per_step",
                         "mean_wait_steps", "preemptions", "reasons"]]
display(table(peers))
viz.show(viz.policy_bars_figure(mixed_rows, title="TensorRT-LLM none / capacity and the peers, one workload",
                                subtitle="all modelled in kvlab; vllm and sglang are kvlab's peers (section 5b); "
                                         "mean wait over the requests that started<br>"
                                         + policies_label(POLICIES, engine)))
for policy in PEER_POLICIES:
    assert mixed_table.loc[policy, "outcome"] in ("reject", "ok")  # no peer crashes or stalls on this workload
    assert set(mixed_runs[policy].ids_with_status("rejected")) >= set(never) - {
        r.request_id for r in mixed if r.prompt_len <= engine.pool_tokens}  # prompts over the pool: rejected
if IS_SEED:
    assert startup and "estimated maximum model length is 2016" in startup

# %% [markdown]
# ### 5b. What the real vLLM and SGLang do
#
# vLLM's own scheduler (version 0.34.0, with its own KV cache manager and block pool) and SGLang's
# (version 0.5.23, its event loop and memory pools) run on a CPU without a GPU or weights:
# `kvlab.backends.vllm.VLLM` and `kvlab.backends.sglang.SGLANG` drive each in its own environment
# (`bash scripts/setup.sh vllm`, `... sglang`) and read back what it did. This notebook shows the
# runs stored in `data/measurements/` (set `live_engines` to run them now). Beside each real run,
# kvlab's peer on the same workload: the last column counts the requests whose status, start
# step, finish step or number of preemptions differ. This notebook's own workloads at the seed's
# pool: the long request with small ones, "not yet" and "never", and the mixed workload (150
# requests); for vLLM also a pool shrunk after start-up (below).

# %%
notebook_names = ["nb04/long-and-small", "nb04/not-yet-and-never", "nb04/mixed-rate-0.05"]
engines = {"vLLM": (VLLM, by_name(vllm_workloads()), notebook_names + ["shrunk/head-of-line",
                                                                         "shrunk/self-preemption"]),
           "SGLang": (SGLANG, by_name(sglang_workloads()), notebook_names)}
real, rows = {}, []
for engine_name, (backend, workloads_, names) in engines.items():
    real[engine_name], source = backend.real_runs(workloads_, names, live=live_engines)
    for name in names:
        modelled = workloads_[name].run_peer()
        for label, result in ((source, real[engine_name][name]), (f"kvlab's {engine_name} peer (modelled)", modelled)):
            summary = result.summary()
            rows.append(dict(workload=name, source=label, finished=summary["finished"], rejected=summary["rejected"],
                             unfinished=summary["waiting"] + summary["running"], preemptions=summary["recomputes"],
                             steps=result.end_step,
                             differing=len({d["request_id"] for d in differences(modelled, real[engine_name][name])})))
display(table(pd.DataFrame(rows).set_index(["workload", "source"])))
for engine_name in engines:
    print(textwrap.fill(f"the long request, at real {engine_name}'s front door: "
                        f"{real[engine_name]['nb04/long-and-small'].reasons['long'].message}", 100))
assert all(row["differing"] == 0 for row in rows)  # each peer does what its engine did, request by request
assert real["vLLM"]["nb04/long-and-small"].reasons["long"].message.startswith(
    "The decoder prompt (length 8192) is longer than the maximum model length of 2016")
assert real["SGLang"]["nb04/long-and-small"].reasons["long"].message.startswith(
    "The input (8192 tokens) is longer than the model's context length (8192 tokens)")

# %% [markdown]
# Where vLLM checks capacity matters once the pool changes after start-up: the start-up check
# passed on the seed's 64 blocks (`max_model_len` 2,016), then the pool the scheduler gets is 40
# blocks (as a persistent workspace took #21470's). A prompt of 1,800 tokens is under
# `max_model_len`, so the front door lets it in; it needs 57 blocks, more than the 39 usable ones.
# Without chunked prefill (or with it and the default full-prompt reservation,
# `scheduler_reserve_full_isl`), it waits at the head of the queue for good, and every small
# request behind it waits too: nothing is rejected, nothing raises, nothing runs (vLLM has no
# stall detector; the run ends at its step limit). With chunked prefill and no full-prompt
# reservation it is admitted chunk by chunk: 512 tokens, then 1,024, and the third chunk does not
# fit, so it preempts itself (it is the only request running), frees its blocks and starts over,
# every three steps, for good. Both runs below are the real vLLM's.

# %%
for name, what in (("shrunk/head-of-line", "the head-of-line wait"),
                   ("shrunk/self-preemption", "the chunked self-preemption loop")):
    result = real["vLLM"][name]
    viz.show(viz.scheduler_timeline_figure(result, title=f"{what}: {name}", stall_detector=False,
                                           subtitle=f"real {defaults_label(engines['vLLM'][1][name].args)}; "
                                                    "40-block pool, start-up on 64"))
head_of_line, loop = real["vLLM"]["shrunk/head-of-line"], real["vLLM"]["shrunk/self-preemption"]
assert set(head_of_line.status.values()) == {"waiting"} and max(head_of_line.trace.column("running")) == 0
assert loop.requests["long"].num_recomputes == loop.end_step // 3 and loop.error is None
print(f"head-of-line: {len(head_of_line.status)} requests waiting after {head_of_line.end_step:,} steps; "
      f"self-preemption: the long request preempted {loop.requests['long'].num_recomputes:,} times in "
      f"{loop.end_step:,} steps")

# %% [markdown]
# Every style that checks capacity somewhere ends in "reject" with the rest finished, on a pool
# that did not change after start-up; the difference is *where* and *with what words*:
# TensorRT-LLM's capacity check and SGLang's front door name the numbers of this request, vLLM
# needs its `max_model_len` lowered by hand first, and a pool that shrinks after vLLM's start-up
# check brings back the silent wait. The reservation styles pay in waiting time what they save in
# preemptions.
#
# ## 6. Try it: the live panel
#
# Pool size (log slider, MiB), the long request's context and the policy: the scheduler timeline,
# the long request's pages against the pool and the row, and the verdict follow. Things to find: the
# pool at which the long request stops crashing under `none/clamped` but still stalls (the row's
# spare entries); the pool from which TensorRT-LLM's three policies all say ok; why the peers reject
# this context at every pool (a prompt as long as their context length leaves no room for its
# output), and, with a shorter context, the pool from which they say ok too; at the default pool,
# that both peers serve 1,536 tokens and reject 2,048, and the limits between the two steps that the
# verdict gives (vLLM: its `max_model_len`, the pool less one block, 2,016 tokens; SGLang: the pool
# less six tokens, 2,042, or the context length). `tests/notebook/test_widgets.py` checks that each
# of these can be found on the sliders.

# %%
panel = admission_panel(pool_mib=pool_mib, context=context, policy="none/clamped", num_small=min(num_small, 8),
                        stall_limit=stall_limit)
assert panel.outcome == beside_table.loc["none/clamped", "outcome"] or num_small > 8
panel

# %% [markdown]
# ## 7. A real hour: Azure's code traffic on a shrunk pool
#
# Everything so far ran workloads drawn for the purpose. Azure's public LLM inference trace (2023,
# CC-BY 4.0; `data/traces/README.md`) records an hour of real production traffic: when each request
# arrived, its prompt and its output length. Its code-completion hour has 8,819 requests, prompts of a
# median 1,469 and at most 7,437 tokens, and short outputs (median 13). Replayed here as recorded
# (`kvlab.run.workload.azure_trace`), one scheduler iteration taken as `seconds_per_iteration` seconds
# of the trace's clock (an assumption: a real iteration's length depends on the model, the batch and
# the GPU), with at most 16 sequences, 8,192 tokens a pass, chunked prefill (as #21470's deployment
# ran) and `max_seq_len` configured at 16,384. The trace records lengths, not prompts: its requests
# share no prefix, so prefix caching, on by default in vLLM and SGLang, would find nothing to reuse
# here; section 8's Mooncake traces carry prefix hashes.
#
# First on a pool that holds every prompt of the hour (8,192 tokens), then on the same pool with
# an eighth taken away (7,168 tokens), as the persistent MoE workspace took its share of #21470's
# pool: a few hundred of the hour's contexts no longer fit. The pools use the seed's small
# geometry (2 KiB a token), so each is a real tensor of 14 to 16 MiB; a Llama-3.1-8B-shaped pool of
# the same tokens would be 128 KiB a token, 0.9 to 1 GiB. The peers run beside TensorRT-LLM's three
# regimes: vLLM with `max_model_len` at its estimate for the pool, SGLang with the same context
# length (kvlab.analysis.compare says how each engine is mapped).
#
# **The next cell takes about half a minute** on a quiet 2-core laptop, longer on a busy one (ten
# replays of the hour): it says so as it starts and a bar counts the regimes. Let it finish: the
# cells after it read its results.

# %%
print(f"Replaying {trace_minutes:g} minutes of Azure's code hour on 2 pools under {len(POLICIES)} regimes: "
      "about half a minute on a 2-core laptop (a bar counts the regimes)...", flush=True)
trace = azure_trace("code", seconds_per_iteration, minutes=trace_minutes)
trace_engines = {"sized": EngineConfig(pool_mib=16.0, max_seq_len=16384, max_batch_size=16, max_num_tokens=8192,
                                       chunked_prefill=True, stall_limit=stall_limit)}
trace_engines["shrunk"] = dataclasses.replace(trace_engines["sized"], pool_mib=14.0)
trace_runs = {name: run_policies(trace, tuple(POLICIES), trace_engine, max_steps=10**9)  # each run ends by itself
              for name, trace_engine in trace_engines.items()}
trace_tables = {name: outcome_table(runs_) for name, runs_ in trace_runs.items()}
print(f"{len(trace):,} requests in {trace_minutes:g} minutes of the code hour, "
      f"longest prompt {max(r.prompt_len for r in trace):,} tokens")
for name, trace_engine in trace_engines.items():
    print(textwrap.fill(f"{name}: {trace_engine.describe()}", 100))
    display(table(trace_tables[name][["outcome", "finished", "rejected", "unfinished", "steps", "mean_queue_steps",
                                "mean_wait_steps", "preemptions", "error"]]))
    viz.show(viz.served_over_time_figure(trace_runs[name], seconds_per_iteration,
                                         title=f"Azure's code hour on the {name} pool ({trace_engine.pool_tokens:,} tokens)",
                                         subtitle=policies_label(POLICIES, trace_engine)))

# %%
shrunk_manager = trace_engines["shrunk"].manager("clamped")
never_fits = sorted(r.request_id for r in trace if demand_blocks(r, shrunk_manager) > shrunk_manager.total_blocks)
sized, shrunk = trace_tables["sized"], trace_tables["shrunk"]
print(f"{len(never_fits):,} of {len(trace):,} requests can never fit the shrunk pool")
capacity_run = trace_runs["shrunk"]["capacity"]
queued_steps = pd.Series([capacity_run.requests[i].activated_step - capacity_run.requests[i].arrival_step
                          for i in never_fits if capacity_run.requests[i].activated_step is not None], dtype=float)
if len(queued_steps):
    print(textwrap.fill(f"capacity rejects them as they reach its scheduler: {(queued_steps > 0).sum():,} of "
                        f"them first waited in the executor's queue, a median {queued_steps.median():,.0f} steps "
                        f"({queued_steps.median() * seconds_per_iteration:,.0f} s of the trace)", 100))
for name, runs_ in trace_runs.items():
    for policy, run in runs_.items():
        if run.error is not None:
            print(textwrap.fill(f"{name} pool, {policy}: {type(run.error).__name__} "
                                f"{run.end_step * seconds_per_iteration:,.1f} s into the trace, "
                                f"{run.summary()['finished']:,} requests finished", 100))
assert (sized.outcome == "ok").all() and (sized.finished == len(trace)).all()  # sized for the hour: no regime fails
if never_fits:
    assert shrunk.loc["none/clamped", "outcome"] == "crash"         # the first long context stops the engine
    assert shrunk.loc["none/clamped", "finished"] < len(trace) - len(never_fits)
    assert shrunk.loc["none/configured", "outcome"] == "stall"      # the one-line fix: starvation, then the deadlock
    assert sorted(trace_runs["shrunk"]["capacity"].ids_with_status("rejected")) == never_fits
    assert shrunk.loc["capacity", "finished"] == len(trace) - len(never_fits)  # everything else is served
    assert shrunk.loc["capacity", "mean_queue_steps"] <= sized.loc["capacity", "mean_queue_steps"]  # and waits less
    assert (queued_steps > 0).mean() > 0.5  # most never-fits first waited in the executor's queue, as the prose says
for name, table_ in trace_tables.items():  # the peers reject at their doors and serve the rest
    assert set(table_.loc[list(PEER_POLICIES), "outcome"]) <= {"ok", "reject"}, name
    assert (table_.loc[list(PEER_POLICIES), "unfinished"] == 0).all(), name

# %% [markdown]
# On the pool sized for the hour the three regimes are the same engine: nothing reaches the capacity
# check, and no context needs more entries than the row. Take an eighth of the pool and the hour
# splits them (the printout above says when each engine stopped). The historical engine
# (`none/clamped`) raises issue #21470's `ValueError` at the first context that needs more pages
# than the row holds, a moment into the hour, and every request of the hour is lost with it. The
# one-line fix (`none/configured`) survives that request and refuses it every pass; requests that
# can never fit stay in the active set, and in the trace's first quiet stretch they are all that is
# left: after 1,000 passes without progress the deadlock detector stops the engine, and everything
# still queued is lost. With admission control (`capacity`) exactly the requests that can never fit
# are rejected, with the numbers, as soon as they reach the scheduler (most first wait in the
# executor's queue behind the requests ahead of them: the printout counts them), and every other
# request of the hour is served: the shrunk pool costs those requests, not the engine. It does not
# cost the others queueing time: the mean queue (`mean_queue_steps`) is shorter than on the sized
# pool, because the longest contexts, rejected once they reach the scheduler, no longer take their
# turn.
#
# The peers, vLLM and SGLang, reject at their doors the prompts over their limits on the shrunk
# pool (vLLM's `max_model_len`, the pool less one block; SGLang's, the pool less six tokens) and
# serve the rest, a request whose output would overrun the pool stopped short at the engine's
# length limit (finish reason "length"): neither crashes nor stalls. Their waiting
# times count from arrival, as TensorRT-LLM's do, but they have no executor queue: every request
# waits in the scheduler's own.

# %% [markdown]
# ## 8. Real prompts share prefixes: block reuse, "not yet" and "never"
#
# TensorRT-LLM reuses KV blocks by default (`KvCacheConfig.enable_block_reuse=True`; kvlab's
# manager models the V2 manager's way, docs/REFERENCE.md §10): a page whose tokens are computed is
# *committed* under a key standing for the whole prefix it ends; a later prompt with the same
# prefix *holds* it instead of computing it (the prompt less its last token is matched; a page
# shared only in part is copied); when no request holds a committed page it stays cached and
# evictable, counted as free, and an allocation that finds too few free pages evicts the least
# recently released first. The scheduler prepares a context before it charges the budget, so a
# reused prefix is neither computed nor charged.
#
# First the smallest story, on this notebook's pool, under admission control: "first" runs a
# while; "follow-up" repeats its prompt and adds an eighth of the pool; "too-long" repeats it
# too but asks for more pages than the pool has; "stranger", unrelated, comes once both are
# done; "late" repeats follow-up's prompt (first's and its eighth) while "stranger" runs.

# %%
story_runs, story_caches = {}, {}
for reuse in (True, False):
    story_engine = dataclasses.replace(engine, enable_block_reuse=reuse)
    story_scheduler = build_scheduler("capacity", story_engine)
    story_runs[reuse] = simulate(story_scheduler, shared_prefix_story(story_engine))
    story_caches[reuse] = story_scheduler.manager.prefix_cache
story = pd.DataFrame([dict(row, block_reuse=reuse, reused_tokens=story_runs[reuse].requests[row["request_id"]].prepopulated_prompt_len)
                      for reuse in (True, False) for row in request_timeline(story_runs[reuse])])
story["started"] = story["started"].astype("Int64")  # whole steps; blank for the rejected request
display(table(story.set_index(["block_reuse", "request_id"])[["prompt_len", "arrival", "started", "ended", "status",
                                                              "refusals", "reused_tokens"]]))
started = story.set_index(["block_reuse", "request_id"])["started"]
reused = story.set_index(["block_reuse", "request_id"])["reused_tokens"]
no_tier_engine = dataclasses.replace(engine, enable_block_reuse=True, host_cache_size=0)
no_tier = simulate(build_scheduler("capacity", no_tier_engine), shared_prefix_story(no_tier_engine))
print(f"pages evicted from the GPU with reuse on: {story_caches[True].evicted_blocks:,}; \"late\" reuses "
      f"{reused[True, 'late']:,} tokens with the automatic host tier, {no_tier.requests['late'].prepopulated_prompt_len:,} "
      "with no tier below the GPU")
first_prompt = story_runs[True].requests["first"].prompt_len
late_prompt = story_runs[True].requests["late"].prompt_len
assert started[True, "follow-up"] == 1 < started[False, "follow-up"]  # fits at once, only because its prefix is cached
assert reused[True, "follow-up"] == first_prompt                       # every page of first's prompt held, none computed
assert all(story_runs[r].status["too-long"] == "rejected" for r in (True, False))  # never: held pages are its pages too
assert story_caches[True].evicted_blocks > 0 and reused[True, "late"] == late_prompt - 1  # evicted, then brought back up
assert 0 < no_tier.requests["late"].prepopulated_prompt_len < first_prompt  # no tier: only what survived on the GPU

# %% [markdown]
# With reuse, "follow-up" starts in the pass it arrives: the pages of first's prompt are
# already there, and it needs only its own eighth. Without reuse it needs all its pages beside
# "first" and waits until "first" finishes: reuse turned a "not yet" into "now". It cannot turn a
# "never" into anything: a held page is still one of the request's pages, so "too-long" needs more
# pages than the pool has either way, and admission control rejects it either way (`demand_blocks`
# counts every page of a request, shared or not). "stranger" finds first's pages cached, counted
# as free, and evicts the least recently released of them to make room. Evicted is not forgotten:
# as upstream's V2 manager does, an evicted page moves down to the host tier and keeps its place
# in the radix tree, so "late" finds its whole prompt (all but the last token, which is always
# computed) and brings the evicted pages back up. With no tier below the GPU (`host_cache_size=0`,
# the printout's last figure) an evicted page is gone, and "late" reuses only what survived on the
# GPU and computes the rest.
#
# Now real traffic. Mooncake's FAST'25 conversation trace (Apache-2.0; data/traces/) records an
# hour of 12,031 requests with 512-token block hashes that stand for each prompt's prefix: a
# never-evicting cache could serve at most the share computed by `reuse_ceiling` below. It is
# replayed on `MOONCAKE_ENGINE`, 1.37 M tokens of KV (about what eight 80 GB GPUs keep for
# Llama-3.1-70B), under admission control with reuse on and off (the three regimes are the same
# engine on a pool that holds every prompt, as section 7 showed for Azure's hour). Its pages are
# stored at 4 bytes a token, so the real tensor is 5.2 MiB, not 420 GiB: scheduling depends on
# the count of pages only, and every count below is the real deployment's. **The next cell takes
# about a minute** on a quiet 2-core laptop, longer on a busy one: it says so as it starts and a
# bar counts the two replays. Let it finish: the cells after it read its results.

# %%
print(f"Replaying {mooncake_minutes:g} minutes of Mooncake's conversation trace, reuse on and off: "
      "about a minute on a 2-core laptop (a bar counts the two replays)...", flush=True)
mooncake = mooncake_trace("conversation", minutes=mooncake_minutes)
ceiling = reuse_ceiling(mooncake)
mooncake_runs = replay_with_reuse(mooncake, ("capacity",))
mooncake_table = pd.DataFrame(reuse_table(mooncake_runs, ceiling)).set_index(["policy", "block_reuse"])
print(f"{len(mooncake):,} requests in {mooncake_minutes:g} minutes, {ceiling.tokens:,} prompt tokens; "
      f"a never-evicting cache could serve {ceiling.cached_tokens:,} ({ceiling.cached_tokens / ceiling.tokens:.1%})")
print(textwrap.fill(MOONCAKE_ENGINE.describe(), 100))
display(table(mooncake_table[["finished", "rejected", "unfinished", "mean_ttft_steps", "reused_tokens", "reused_share",
                              "of_ceiling"]]))
on, off = mooncake_table.loc[("capacity", True)], mooncake_table.loc[("capacity", False)]
assert on.finished == off.finished == len(mooncake) and off.reused_tokens == 0
assert 0 < on.reused_tokens <= ceiling.cached_tokens and on.mean_ttft_steps <= off.mean_ttft_steps

# %% [markdown]
# Every request finishes either way: the pool holds every prompt of the hour. Reuse serves a
# share of the prompt tokens from the cache (the table's `reused_share`), and first tokens come
# sooner, since a reused prefix takes nothing of a pass's token budget. The share stays below
# the ceiling (`of_ceiling`): the cache is the pool and, below it, the automatic host tier (as
# much memory again), where an evicted page moves and keeps its place in the tree, as upstream's
# V2 manager does (docs/REFERENCE.md §10). At this hour's rate the two hold only the last few
# minutes of prompts, while a conversation's next turn often comes later than that. `python
# benchmarks/mooncake_replay.py` replays the hour under every regime, with reuse on and off.

# %% [markdown]
# ## 8b. The three engines as they ship
#
# vLLM and SGLang cache prefixes by default too, and each counts a cached prefix in its own way
# when it decides whether a request fits. Each engine runs here as it ships, with its
# configuration's defaults, which are the engine's own (`kvlab.analysis.shipped.as_shipped`):
# TensorRT-LLM with block reuse (and, as in the rest of this notebook, PR #21720's capacity check);
# vLLM 0.34.0 with prefix caching and async scheduling; SGLang 0.5.23 with its radix cache and its
# overlap scheduler. Every table and figure below names these defaults with `defaults_label`, and
# "caching off" is the same engine with only its cache switched off.
#
# What a *hit* is, and how admission counts it:
#
# - **TensorRT-LLM** matches whole 32-token pages, each committed under a key for the whole
#   prefix it ends (a page shared only in part is copied). Its scheduler *prepares* a context
#   (matches its prefix and holds the matched pages) before it charges the pass's budget, so a
#   reused prefix is neither computed nor charged (kvlab: `kvlab/sched/scheduler.py`
#   `Scheduler._schedule_context`, `kvlab/core/prefix_cache.py`). The capacity check counts every
#   page of a request, shared or not (`demand_blocks`).
# - **vLLM** matches full blocks (32 tokens here) by a hash chained over every token before them.
#   `Scheduler.schedule` (vllm/v1/core/sched/scheduler.py) asks `get_computed_blocks` for the
#   longest run of cached blocks (never the prompt's last token), then `allocate_slots`
#   (vllm/v1/core/kv_cache_manager.py) counts them. A hit block that another request holds costs
#   nothing. A hit block that no request holds sits in the free queue, so it counts as a block
#   taken (`get_num_blocks_to_allocate`), and `BlockPool.touch` takes it out of the queue before new
#   blocks are taken. New blocks come from the front of the free queue and evict whatever was
#   cached there (`BlockPool.get_new_blocks`, vllm/v1/core/block_pool.py). In kvlab this is
#   `kvlab/sched/vllm.py` (`_cache_hit`, `_allocate`) over `kvlab/sched/vllm_prefix_cache.py`.
# - **SGLang** matches single tokens in a radix tree. `Scheduler._get_new_batch_prefill_raw`
#   (sglang/srt/managers/scheduler.py) first matches each waiting request's prefix
#   (`init_next_round_input`, which calls the tree's `match_prefix`; never the last token) and
#   locks the matched path, then `PrefillAdder.add_one_req` (sglang/srt/managers/schedule_policy.py)
#   charges only the rest of the prompt, plus the output it reserves, against the free tokens and
#   the tree's evictable ones. In kvlab this is `kvlab/sched/sglang.py` (`_get_new_batch_prefill`,
#   `_match_prefix`), `kvlab/sched/sglang_prefill.py` (`PrefillAdder.add_one_req`) and
#   `kvlab/sched/sglang_radix.py`.
#
# All three engines count the matched prefix once, however many requests hold it. None of them
# stops counting it against the request: a page a request holds is one of its pages, cached or not.
# First, section 8's story on each engine, with max_seq_len set to the pool (as an operator sets it
# after vLLM's start-up check), so that each engine turns "too-long" away by its own rule.

# %%
story_shipped = shared_prefix_runs(engine)
story_table = pd.DataFrame(story_rows(story_shipped)).set_index(["engine", "caching", "request_id"])
story_table["started"] = story_table["started"].astype("Int64")  # whole steps; blank for a rejection
display(table(story_table.reset_index().set_index(["defaults", "request_id"])[
    ["prompt_len", "arrival", "started", "status", "reused_tokens"]]))
for shipped_engine in SHIPPED_ENGINES:
    effect = caching_effect(story_shipped, shipped_engine)
    follow_on, follow_off = (story_table.loc[(shipped_engine, on, "follow-up")] for on in (True, False))
    if shipped_engine == "SGLang":  # overlap loop: first's prompt is not in the tree when follow-up comes
        assert follow_on.started == follow_off.started > follow_on.arrival, shipped_engine  # not yet, either way
    else:
        assert follow_on.started == follow_on.arrival < follow_off.started, shipped_engine  # not yet -> now
    assert follow_on.reused_tokens == story_table.loc[(shipped_engine, True, "first"), "prompt_len"]
    assert effect.never_on == effect.never_off == ("too-long",), shipped_engine  # never, either way

# %% [markdown]
# On TensorRT-LLM and vLLM, with caching, "follow-up" starts in the pass it arrives on the pages
# of first's prompt; without it, it waits until "first" finishes. SGLang as it ships makes it
# wait either way, and the reason is timing, not room: its overlap loop processes a batch's
# results one step late, and only then does a prefilled prompt enter the radix tree. "follow-up"
# arrives one step after "first" was scheduled, finds nothing cached yet, does not fit beside
# "first", and SGLang admits nothing more until a running request leaves (`batch_is_full`); when
# "first" finishes, "follow-up" starts on its cached prompt. With the overlap loop off
# (`disable_overlap_schedule=True`) it starts at once, as on the other two: the real SGLang 0.5.23
# does both (kvlab's peer is held to it, docs/CONFORMANCE.md). "too-long" is
# rejected either way, each engine by its own rule: TensorRT-LLM's capacity check (more pages than
# the pool), vLLM's front door (longer than `max_model_len`), SGLang's front door (longer than its
# context length). None of these checks looks at the cache, and none needs to: a cached prefix
# saves computing it, and where a running request already holds it, it saves room. A prompt longer
# than the pool still needs more pages than the pool has, and cached pages are pages too. So
# caching can turn a "not yet" into "now", but it cannot turn a "never" into anything.
#
# Now real conversations. `conversation_slice` takes the first 12 conversations of at least three
# turns from the first ten minutes of Mooncake's conversation trace (a conversation: the requests
# whose first two 512-token blocks agree; every prompt of the trace starts with the same block).
# They arrive as recorded, minutes apart. The slice runs on two pools of `MOONCAKE_ENGINE`'s
# geometry (`SLICE_POOL_PAGES`): a roomy one, 192,000 tokens, and a tight one, 38,400 tokens,
# smaller than the slice's two longest prompts. Times are in scheduler steps (50 ms of the trace's
# clock each). `of_ceiling` compares what was reused with what a cache that never forgets would
# serve.

# %%
conversations = conversation_slice(mooncake_trace("conversation", minutes=10.0), 12)
slice_ceiling = reuse_ceiling(conversations)
slice_runs = {pool: shipped_runs(conversations, slice_engine(pages)) for pool, pages in SLICE_POOL_PAGES.items()}
slice_tables = {pool: pd.DataFrame(caching_rows(runs_, slice_ceiling)).set_index(["engine", "caching"])
                for pool, runs_ in slice_runs.items()}
print(f"{len(conversations)} requests of 12 conversations; longest prompt {max(r.prompt_len for r in conversations):,} "
      f"tokens; a cache that never forgets would serve {slice_ceiling.cached_tokens / slice_ceiling.tokens:.1%} "
      "of their prompt tokens")
for pool, pages in SLICE_POOL_PAGES.items():
    print(f"{pool} pool: {pages:,} pages of 32 tokens ({slice_engine(pages).pool_tokens:,} tokens)")
    display(table(slice_tables[pool][["defaults", "finished", "rejected", "reused_tokens", "reused_share", "of_ceiling",
                                      "waited", "mean_ttft_steps", "preemptions"]]))
    viz.show(viz.caching_bars_figure(caching_rows(slice_runs[pool], slice_ceiling),
                                     title=f"12 Mooncake conversations on the {pool} pool ({pages * 32:,} tokens)"))
slice_effects = {shipped_engine: caching_effect(slice_runs["tight"], shipped_engine) for shipped_engine in SHIPPED_ENGINES}
for shipped_engine, effect in slice_effects.items():
    print(textwrap.fill(f"{shipped_engine}, tight pool: {counted(len(effect.now), 'request')} waited only with caching "
                        f"off, {len(effect.later)} only with it on; rejected either way: {', '.join(effect.never_on)}", 100))
roomy, tight = slice_tables["roomy"], slice_tables["tight"]
too_long = sorted(r.request_id for r in conversations if r.prompt_len >= slice_engine(SLICE_POOL_PAGES["tight"]).pool_tokens)
for shipped_engine in SHIPPED_ENGINES:
    on, off = tight.loc[(shipped_engine, True)], tight.loc[(shipped_engine, False)]
    assert off.reused_tokens == 0 < on.reused_tokens and on.mean_ttft_steps < off.mean_ttft_steps
    assert list(slice_effects[shipped_engine].never_on) == list(slice_effects[shipped_engine].never_off) == too_long
    assert slice_effects[shipped_engine].now  # caching turned some "not yet" into "now"
    assert roomy.loc[(shipped_engine, True), "of_ceiling"] > 0.8 > on.of_ceiling  # the tight pool forgets
    if shipped_engine != "TensorRT-LLM":  # nothing below the GPU: it forgets more than TensorRT-LLM's tiers
        assert on.of_ceiling < 0.75 * tight.loc[("TensorRT-LLM", True), "of_ceiling"]
    assert (roomy.rejected == 0).all() and roomy.loc[(shipped_engine, True), "hit_requests"] == len(conversations) - 1

# %% [markdown]
# On the roomy pool each engine serves most of what a cache that never forgets would (the table's
# `of_ceiling`), and first tokens come sooner. On the tight pool the same conversations find much
# less of their history. Take vLLM: when a request finishes, its blocks go to the back of the free
# queue (its last block first, so its prefix is evicted last), and every new block is taken from
# the front, evicting the block cached there. A conversation's blocks survive only until about a
# pool's worth of other blocks has been allocated after them. On 38,400 tokens that is two or three
# of these prompts (a median of about 15,000 tokens), while a conversation's next turn comes a
# median of 1.4 minutes later, after a median of eight other prompts of the slice (about 110,000
# tokens, nearly three tight pools). For most requests what survives is the one block every prompt
# starts with, because every request uses it again: almost every request gets a hit
# (`hit_requests`), but most hits are short. Only a turn that follows its previous turn closely
# still finds most of its history (the tall cached bars in the panel below). SGLang's least
# recently used tree leaves forget in the same way. TensorRT-LLM forgets less (about twice the
# share of vLLM's and SGLang's here): a page it evicts from the GPU moves to the automatic host
# tier, as much memory again, and keeps its place in the radix tree, so a later turn brings its
# history back up instead of computing it. vLLM and SGLang as they ship keep nothing below the GPU
# (vLLM's CPU offloading needs a KV connector; SGLang's hierarchical cache is off by default).
#
# Caching still shortens the waits on the tight pool: requests need less new room and less of the
# pass's budget, so some that waited without it start as they arrive (the printout counts them
# per engine). A few go the other way: a request that starts sooner changes who holds the pool a
# moment later, and TensorRT-LLM preempts a few more requests with caching on here (the table's
# `preemptions`). The two prompts longer than the pool are rejected by every engine with caching
# on and off: "never" stays "never".
#
# Try it: the engine, caching on or off, the pool and the slice. Things to find: the pool from
# which nothing is rejected; the pool at which each engine's hits stop growing; that every rejected
# request is rejected with caching off too. The figure shows each request's prompt tokens (found
# cached or computed) and its time to first token, beside the same engine with caching the other
# way. `tests/notebook/test_caching_panel.py` checks that the controls drive it.

# %%
caching = caching_panel(engine="vLLM", caching=True, pages=SLICE_POOL_PAGES["tight"])
assert caching.outcome == "reject" and caching.model.effect.never_on == tuple(too_long)
caching

# %% [markdown]
# ## Findings
#
# A resize's `False` is either "not yet" (temporary pressure: wait and retry) or "never" (demand
# beyond the pool: reject). Without admission control, "never" crashes the engine (clamped row,
# issue #21470) or starves and then deadlocks it (configured row, the one-line fix); both with
# the automatic host tier, the real default. With PR #21720's capacity check (a proposal, not
# merged) it is rejected at once, with the numbers, and every other request finishes. Prefix
# caching, on by default in TensorRT-LLM, vLLM and SGLang, turns some "not yet" into "now" (a
# cached prefix needs no new room where another request holds it, and no computing) but never a
# "never" into anything: a cached page is still one of the request's pages.

# %%
scenario = "rtx5080-4mib" if IS_SEED else f"{pool_mib:g}MiB-{context}tok"
findings = [Finding(scenario=f"{scenario}: long request + {num_small} small, {engine.tier_name}", policy=policy,
                    outcome=beside_table.loc[policy, "outcome"],
                    numbers=(f"{beside_table.loc[policy, 'finished']:,} finished, {beside_table.loc[policy, 'rejected']:,} rejected, "
                             f"{beside_table.loc[policy, 'unfinished']:,} unfinished in {counted(int(beside_table.loc[policy, 'steps']), 'step')}; "
                             f"long request needs {long_pages:,} pages of {engine.total_blocks:,}"
                             + (f"; {beside_table.loc[policy, 'error']}" if beside_table.loc[policy, "error"] else "")))
            for policy in TRTLLM_POLICIES]
findings += [Finding(scenario=f"mixed workload ({len(mixed):,} requests, seed {seed}), {engine.tier_name}", policy=policy,
                     outcome=mixed_table.loc[policy, "outcome"],
                     numbers=(f"goodput {mixed_table.loc[policy, 'goodput_tokens_per_step']:.3g} tokens/step, "
                              f"mean wait {mixed_table.loc[policy, 'mean_wait_steps']:,} steps, "
                              f"{counted(int(mixed_table.loc[policy, 'preemptions']), 'preemption')}, "
                              f"{mixed_table.loc[policy, 'rejected']:,} rejected, {mixed_table.loc[policy, 'unfinished']:,} unfinished"))
             for policy in POLICIES]
findings += [Finding(scenario=(f"Azure code trace, {len(trace):,} requests in {trace_minutes:g} min, pool shrunk to "
                               f"{trace_engines['shrunk'].pool_tokens:,} tokens"), policy=policy,
                     outcome=shrunk.loc[policy, "outcome"],
                     numbers=(f"{shrunk.loc[policy, 'finished']:,} finished, {shrunk.loc[policy, 'rejected']:,} rejected, "
                              f"{shrunk.loc[policy, 'unfinished']:,} unfinished; {len(never_fits):,} can never fit; "
                              f"mean queue {shrunk.loc[policy, 'mean_queue_steps']:,} steps"))
             for policy in POLICIES]
findings += [Finding(scenario=(f"Mooncake conversation trace, {len(mooncake):,} requests in {mooncake_minutes:g} min, "
                               f"{MOONCAKE_ENGINE.pool_tokens:,}-token pool"), policy=f"capacity, block reuse {'on' if reuse else 'off'}",
                     outcome="ok" if row.finished == len(mooncake) else "stall",
                     numbers=(f"{row.reused_tokens:,} prompt tokens reused ({row.reused_share:.1%}; {row.of_ceiling:.1%} of the "
                              f"unbounded cache's); mean TTFT {row.mean_ttft_steps:.2f} steps"))
             for (policy, reuse), row in mooncake_table.iterrows()]
tight_pages = SLICE_POOL_PAGES["tight"]
findings += [Finding(scenario=(f"{len(conversations)} Mooncake conversation turns (12 conversations), "
                               f"{tight_pages * 32:,}-token pool"), policy=tight.loc[(e, True), "defaults"],
                     outcome="reject" if tight.loc[(e, True), "rejected"] else "ok",
                     numbers=(f"caching on: {tight.loc[(e, True), 'reused_tokens']:,} prompt tokens reused "
                              f"({tight.loc[(e, True), 'reused_share']:.1%}), mean TTFT "
                              f"{tight.loc[(e, True), 'mean_ttft_steps']:,.0f} steps against "
                              f"{tight.loc[(e, False), 'mean_ttft_steps']:,.0f} off; "
                              f"{counted(len(slice_effects[e].now), 'request')} not yet -> now; "
                              f"{len(slice_effects[e].never_on):,} rejected with caching on and off"))
             for e in SHIPPED_ENGINES]
findings = report_findings(findings)
if IS_SEED:
    assert [f["outcome"] for f in findings[:3]] == ["crash", "stall", "reject"]
