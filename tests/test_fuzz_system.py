"""Stateful fuzzing of the manager and the scheduler together (hypothesis).

One engine (KVCacheManager or MambaHybridCacheManager, Scheduler, Engine) under a random width
policy, admission policy and scheduler settings. Rules: requests arrive, the engine steps, and
an outside tenant creates, resizes, suspends, resumes and frees its own caches on the same
manager (pressure the scheduler must survive: pages and page-index slots come and go between
passes). After every rule, independently of the library's own checks:

- pages are conserved and no page is owned twice;
- every page-index entry of every row points at a page its cache owns (rows of free slots
  and of the dummy slot are empty);
- every request is in exactly one place (not yet arrived, queued, live, or retired) and one state,
  consistent with the cache it holds; an ended request has a reason and an event;
- nothing is lost (requests may still arrive after the engine stopped), and the engine stops
  only by PageIndexTooShort or SchedulerDeadlock (never PageIndexTooShort under "capacity");
- under "capacity" admission, with recompute pause on and no outside tenant, 300 steps never
  pass without progress (without admission control they can: see ``drain``);
- numbers arrive as numpy integers too, and every request keeps plain ints;
- a handle the tenant freed raises when used, and changes nothing;
- a token budget, chunk unit and context limit that can never schedule a chunk is refused at
  construction with a message naming them; draft tokens may exceed the budget.

``benchmarks/fuzz_system.py`` runs the same machine for minutes at random; here one bounded,
derandomized run.
"""

from __future__ import annotations

import collections
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kvlab import KVCacheManager, KVGeometry, MaxSeqLenClampWarning, PageIndexTooShort, Request
from kvlab.case_studies import REVIEW_MAMBA
from kvlab.core.mamba import MambaHybridCacheManager, num_dummy_slots
from kvlab.core.page_index import BAD_PAGE_INDEX, WIDTH_POLICIES
from kvlab.core.prefix_cache import chain_hashes
from kvlab.core.request import LIVE_STATES, REQUEST_STATES
from kvlab.run.simulation import Engine
from kvlab.run.trace import EVENT_KINDS
from kvlab.sched.admission import ADMISSION_POLICIES
from kvlab.sched.scheduler import Scheduler, SchedulerDeadlock

ENDED_EVENTS = {"finished": {"finished"}, "rejected": {"rejected", "aborted"}}


def build_manager(
    tokens_per_block, blocks, max_seq_len, slots, width_policy, extra, hybrid, resident, host=None
):
    """A small manager; ``hybrid``: recurrent-state slots capped at ``resident`` sequences
    (PR #17261's clamp); ``host``: pages of the tier below the GPU (None: automatic)."""
    geo = KVGeometry(
        num_layers=1, num_kv_heads=1, head_dim=8, dtype="float16", tokens_per_block=tokens_per_block
    )
    blocks = max(blocks, extra // tokens_per_block + 1)  # the pool must hold more than the extra
    common = dict(
        max_seq_len=max_seq_len,
        max_batch_size=slots,
        page_index_policy=width_policy,
        num_extra_kv_tokens=extra,
        host_cache_size=None if host is None else host * geo.bytes_per_block,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaxSeqLenClampWarning)
        if not hybrid:
            return KVCacheManager(geo, quota_bytes=blocks * geo.bytes_per_block, **common)
        quota = (
            min(resident, slots) + num_dummy_slots()
        ) * REVIEW_MAMBA.bytes_per_slot + blocks * geo.bytes_per_block
        return MambaHybridCacheManager(geo, REVIEW_MAMBA, quota, residency="clamped", **common)


class SystemMachine(RuleBasedStateMachine):
    """Manager + scheduler + engine, with an outside tenant on the same pool."""

    #: rules run, by name, over every instance (the benchmark reads it)
    rules_run: collections.Counter = collections.Counter()

    # admission: every policy of ADMISSION_POLICIES (the coverage test names each), "none" first,
    # where the derandomized coverage run's PageIndexTooShort comes from (the peers' own loops,
    # kvlab.sched.vllm and kvlab.sched.sglang, have property tests of their own)
    @initialize(
        tokens_per_block=st.sampled_from([1, 2, 4, 8, 16]),
        blocks=st.integers(1, 40),
        max_seq_len=st.integers(1, 512),
        slots=st.integers(1, 6),
        width_policy=st.sampled_from(sorted(WIDTH_POLICIES)),
        admission=st.sampled_from(["none", "capacity"]),
        extra=st.integers(0, 3),
        hybrid=st.booleans(),
        resident=st.integers(1, 6),
        max_num_tokens=st.one_of(st.integers(1, 8), st.integers(1, 600)),
        batch=st.integers(1, 8),
        stall_limit=st.integers(1, 40),
        chunked=st.booleans(),
        host=st.sampled_from([0, 0, 4, 16, None]),
        recompute=st.booleans(),
        chunk_unit=st.sampled_from([None, 1, 3, 16]),
        max_context=st.sampled_from([None, 2, 64]),
    )
    def build(
        self,
        tokens_per_block,
        blocks,
        max_seq_len,
        slots,
        width_policy,
        admission,
        extra,
        hybrid,
        resident,
        max_num_tokens,
        batch,
        stall_limit,
        chunked,
        host,
        recompute,
        chunk_unit,
        max_context,
    ):
        self.mgr = build_manager(
            tokens_per_block,
            blocks,
            max_seq_len,
            slots,
            width_policy,
            extra,
            hybrid,
            resident,
            host,
        )
        self.hybrid = hybrid
        self.admission = admission
        self.recompute = recompute
        kwargs = dict(
            max_num_tokens=max_num_tokens,
            max_batch_size=batch,
            stall_limit=stall_limit,
            chunked_prefill=chunked,
            enable_recompute_pause=recompute,
            chunk_unit_size=chunk_unit,
            max_context_length=max_context,
        )
        unit = tokens_per_block if chunk_unit is None else chunk_unit
        if chunked and unit > min(max_num_tokens, max_context or max_num_tokens):
            with pytest.raises(
                ValueError, match=r"chunk_unit_size|max_num_tokens must be at least"
            ):
                Scheduler(self.mgr, admission=admission, **kwargs)  # no chunk could ever run
            self.count("build refused: no chunk fits")
            kwargs.update(chunk_unit_size=1, max_context_length=None)
        self.sched = Scheduler(self.mgr, admission=admission, **kwargs)
        self.engine = Engine(self.sched)
        self.arrived = 0
        self.side = {}  # outside tenant: request_id -> suspended?
        self.stale = []  # the tenant's freed handles
        self.tenant_seen = False
        self.counter = 0
        self.count("build")
        for value in (admission, width_policy, "hybrid" if hybrid else "attention only"):
            self.count(f"build: {value}")

    def count(self, name, n=1):
        SystemMachine.rules_run[name] += n

    @property
    def span_tokens(self):
        return self.mgr.page_index_span_tokens

    # -- the engine ---------------------------------------------------------------------------
    @rule(
        n=st.integers(1, 4),
        prompt_pct=st.one_of(st.integers(1, 25), st.integers(1, 150)),
        new=st.one_of(st.integers(0, 8), st.integers(0, 200)),
        disagg=st.booleans(),
        drafts=st.sampled_from([0, 0, 0, 1, 2, 9]),
        number=st.sampled_from([int, int, np.int16, np.uint32, np.int64]),
        family=st.sampled_from([None, None, 0, 1]),
    )
    def arrive(self, n, prompt_pct, new, disagg, drafts, number, family):
        """``family``: None, prompts that share nothing; else prompts of that family share
        their leading tokens (with earlier arrivals too), so block reuse matches, holds,
        copies and evicts (one hash a page)."""
        pool_tokens = self.mgr.total_blocks * self.mgr.tokens_per_block
        prompt = max(1, pool_tokens * prompt_pct // 100)
        per_hash = self.mgr.tokens_per_block

        def identity(length, i):
            if family is None:
                return {}
            stem = range(family << 40, (family << 40) + length - 1)
            tokens = [*stem, (self.arrived + i) << 20]  # the last token is its own
            return dict(prefix_hashes=chain_hashes(tokens, per_hash), tokens_per_hash=per_hash)

        requests = [
            Request(
                f"r{self.arrived + i}",
                prompt_len=number(max(1, prompt - 3 * i)),
                max_new_tokens=number(max(new, 1) if disagg else new),
                arrival_step=self.engine.step,
                disagg_generation_init=disagg,
                num_draft_tokens=number(drafts),
                **identity(max(1, prompt - 3 * i), i),
            )
            for i in range(n)
        ]
        for r in requests:  # what the checks returned, not the numpy scalars
            assert all(
                type(v) is int
                for v in (r.prompt_len, r.max_new_tokens, r.arrival_step, r.num_draft_tokens)
            )
        self.engine.add_requests(requests)
        self.arrived += n
        self.count("arrive")

    @precondition(lambda self: self.engine.error is None)
    @rule(steps=st.integers(1, 8))
    def step(self, steps):
        self.engine.execute_until(self.engine.step + steps)
        self.check_engine_error()
        self.count("step")

    @precondition(lambda self: self.engine.error is None)
    @rule()
    def drain(self):
        """Many steps: let the live requests finish (or the stall detector fire)."""
        before = self.progress()
        self.engine.execute_until(self.engine.step + 300)
        self.check_engine_error()
        if self.engine.error is None and self.engine.num_live and self.progress() == before:
            # no token, chunk or verdict in 300 steps, and no deadlock raised: the real
            # scheduler spins too (a lone request that never fits, suspended and resumed
            # every pass with a host tier; a DISAGG_GENERATION_INIT that never fits)
            self.count("drain without progress")
            # admission control's promise (PR #21720): what it admits can finish, so with
            # recompute pause on and no outside tenant taking pages the engine gets on. (With
            # recompute pause off, as on a disaggregated generation server, and a host tier
            # smaller than a request, the head request suspends and resumes every pass while
            # the one behind it holds the pages: the real scheduler spins the same way.)
            assert not (self.admission == "capacity" and self.recompute and not self.tenant_seen), (
                "capacity admission let the engine spin without progress"
            )
        self.count("drain")

    def progress(self):
        return sum(
            r.context_current_position + r.num_generated + (r.state in ENDED_EVENTS)
            for r in self.engine.requests
        )

    def check_engine_error(self):
        error = self.engine.error
        if error is None:
            return
        assert isinstance(error, (PageIndexTooShort, SchedulerDeadlock)), repr(error)
        self.count(f"engine stopped: {type(error).__name__}")
        if self.admission == "capacity":
            assert not isinstance(error, PageIndexTooShort), "capacity admitted a request too wide"

    # -- the outside tenant ---------------------------------------------------------------------
    # at most two caches; none on a hybrid manager, whose state slots the scheduler counts
    @precondition(lambda self: not self.hybrid and len(self.side) < 2)
    @rule()
    def create(self):
        rid = f"side-{self.counter}"
        self.counter += 1
        if self.mgr.page_index.free_slots == 0:
            with pytest.raises(RuntimeError, match="page-index slots are in use"):
                self.mgr.create_cache(rid)
            self.count("create refused: no slot")
        else:
            self.mgr.create_cache(rid)
            self.side[rid] = False
            self.tenant_seen = True
        self.count("create")

    def pick(self, index, suspended=None):
        ids = [rid for rid, s in self.side.items() if suspended is None or s == suspended]
        return ids[index % len(ids)] if ids else None

    @precondition(lambda self: not all(self.side.values()))
    @rule(index=st.integers(0, 10), pct=st.integers(0, 130))
    def resize(self, index, pct):
        rid = self.pick(index, suspended=False)
        if rid is None:
            return
        cache = self.mgr.caches[rid]
        capacity = max(cache.history_length, self.span_tokens * pct // 100)
        blocks = -(-capacity // self.mgr.tokens_per_block)
        free, held = self.mgr.free_blocks, cache.num_blocks
        movable = self.mgr.host_tier.movable_blocks  # suspended pages a growth may move down
        if blocks != held and blocks > self.mgr.max_blocks_per_seq:
            with pytest.raises(PageIndexTooShort):
                cache.resize(capacity)
            assert (self.mgr.free_blocks, cache.num_blocks) == (free, held)
        else:
            ok = cache.resize(capacity)
            if blocks - held <= free:
                assert ok
            elif blocks - held > free + movable:
                assert not ok
            assert cache.num_blocks == (blocks if ok else held)
        self.count("resize")

    @precondition(lambda self: not all(self.side.values()))
    @rule(index=st.integers(0, 10))
    def suspend(self, index):
        rid = self.pick(index, suspended=False)
        if rid is None:
            return
        held, free = self.mgr.caches[rid].num_blocks, self.mgr.free_blocks
        self.mgr.suspend(rid)  # the pages stay on the GPU until an allocation needs them
        assert self.mgr.free_blocks == free and self.mgr.caches[rid].num_blocks == held
        self.side[rid] = True
        self.count("suspend")

    @precondition(lambda self: any(self.side.values()))
    @rule(index=st.integers(0, 10))
    def resume(self, index):
        rid = self.pick(index, suspended=True)
        if rid is None:
            return
        mgr = self.mgr
        need, free = mgr.caches[rid].suspended_blocks, mgr.free_blocks
        movable = mgr.host_tier.movable_blocks
        used = (
            mgr.pool.used_blocks - mgr.prefix_cache.evictable_blocks
        )  # cached pages count as free
        util_ok = used <= mgr.max_util_for_resume * mgr.total_blocks
        ok = mgr.resume(rid)
        if not util_ok or need > free + movable:
            assert not ok
        elif need <= free:
            assert ok
        self.side[rid] = not ok
        self.count("resume")

    @precondition(lambda self: bool(self.side))
    @rule(index=st.integers(0, 10))
    def free(self, index):
        rid = self.pick(index)
        if rid is None:
            return
        self.stale.append(self.mgr.caches[rid])
        self.mgr.free(rid)
        del self.side[rid]
        self.count("free")

    @precondition(lambda self: bool(self.stale))
    @rule(
        index=st.integers(0, 10),
        act=st.sampled_from(["resize", "grow", "suspend", "resume", "release", "row"]),
    )
    def use_stale(self, index, act):
        """A freed handle, maybe sharing its slot with a live cache now: it raises, and the
        invariants after this rule show it changed nothing."""
        cache = self.stale[index % len(self.stale)]
        calls = {
            "resize": lambda: cache.resize(self.mgr.tokens_per_block),
            "grow": lambda: cache.grow_within_pages(1),
            "suspend": cache.suspend,
            "resume": cache.resume,
            "release": cache.release,
            "row": lambda: cache.page_indices,
        }
        with pytest.raises(RuntimeError, match="was freed"):
            calls[act]()
        self.count("use stale handle")

    # -- invariants -------------------------------------------------------------------------
    @invariant()
    def pages_and_rows(self):
        mgr = self.mgr
        mgr.check_invariants()
        owned = [p for c in mgr.caches.values() for p in c.pages[c.committed :]]
        cached = [p for p in range(mgr.total_blocks) if mgr.prefix_cache.is_committed(p)]
        assert sorted(owned + cached + mgr.pool.free_pages()) == list(range(mgr.total_blocks)), (
            "pages lost"
        )
        held = {p for c in mgr.caches.values() for p in c.pages[: c.committed]}
        assert held <= set(cached), "a cache holds a page that is not committed"
        slot_of = {c.slot: c for c in mgr.caches.values()}
        assert len(slot_of) == len(mgr.caches), "a page-index slot is held twice"
        table = mgr.page_index.table
        for slot in range(mgr.page_index.slots):
            row = table[:, slot].reshape(-1, mgr.max_blocks_per_seq)
            cache = slot_of.get(slot)
            pages = [] if cache is None else cache.pages
            expected = pages + [BAD_PAGE_INDEX] * (mgr.max_blocks_per_seq - len(pages))
            for plane in row.tolist():
                assert plane == expected, f"slot {slot} points at pages its cache does not own"

    @invariant()
    def requests_accounted_for(self):
        engine, sched, mgr = self.engine, self.sched, self.mgr
        assert len(engine.requests) == self.arrived, "a request was lost"
        unsubmitted = engine.arrivals[engine.next_arrival :] + list(engine.queue)  # not yet active
        submitted = sched.submitted_requests
        places = collections.Counter(r.request_id for r in list(unsubmitted) + list(submitted))
        assert set(places) == {r.request_id for r in engine.requests}
        assert set(places.values()) <= {1}, "a request is in two places"
        counts = dict.fromkeys(REQUEST_STATES, 0)
        for r in unsubmitted:
            assert r.state == "waiting" and r.first_scheduled_step is None
        kinds = collections.defaultdict(set)
        for event in engine.trace.events:
            kinds[event.request_id].add(event.kind)
        for r in submitted:
            counts[r.state] += 1
            cache = mgr.caches.get(r.request_id)
            if r.state == "running":
                assert cache is not None and cache.is_active, r
            elif r.state == "suspended":
                assert cache is not None and cache.suspended, r
            else:
                assert cache is None, f"{r.request_id} is {r.state} and holds a cache"
            if r.state in ENDED_EVENTS:
                assert r.reason and r.end_step is not None, f"{r.request_id} ended without a reason"
                assert kinds[r.request_id] & ENDED_EVENTS[r.state], r
            if r.state == "finished":
                assert r.num_generated == r.max_new_tokens
        assert counts == sched.counts, "state counts drifted"
        live = {r.request_id for r in submitted if r.state in LIVE_STATES}
        assert {r.request_id for r in sched.active_requests} == live
        holders = {r.request_id for r in submitted if r.state in ("running", "suspended")}
        assert set(mgr.caches) == holders | set(self.side), "a cache with no owner"
        host = sum(cache.suspended_blocks for cache in mgr.caches.values())
        assert host == mgr.host_tier.used_blocks <= mgr.host_tier.num_blocks
        if self.hybrid:
            cap = mgr.max_resident_sequences()
            assert cap is None or len(holders) <= cap, "more resident sequences than the cap"
        if not self.side:  # the library's own checks agree (they know no outside tenant)
            sched.check_invariants()
        self.count("invariant checks")

    def teardown(self):
        if not hasattr(self, "engine"):
            return
        self.count("scheduler iterations", self.engine.iterations)
        for event in self.engine.trace.events:
            self.count(f"event: {event.kind}")
        result = self.engine.result(self.engine.step + 1)
        assert set(result.status) == {r.request_id for r in self.engine.requests}
        for request_id, status in result.status.items():
            assert status in ("finished", "rejected", "waiting", "running")
            assert result.reasons[request_id], f"{request_id} ({status}) has no reason"


def test_the_machine_holds_its_invariants_and_reaches_every_rule_and_every_outcome():
    """One bounded, derandomized run (the same programs on every machine): every invariant above
    holds after every rule, and the run is only worth something if it gets everywhere, so it
    must run every rule and see every kind of event, both engine errors included. Random
    exploration for minutes: ``benchmarks/fuzz_system.py``."""
    from hypothesis.stateful import run_state_machine_as_test

    SystemMachine.rules_run.clear()
    run_state_machine_as_test(
        SystemMachine,
        settings=settings(
            max_examples=300,
            stateful_step_count=50,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
    ran = SystemMachine.rules_run
    expected = [
        "build",
        "arrive",
        "step",
        "drain",
        "create",
        "resize",
        "suspend",
        "resume",
        "free",
        "use stale handle",
        "build refused: no chunk fits",
        "engine stopped: PageIndexTooShort",
        "engine stopped: SchedulerDeadlock",
    ]
    # every event TensorRT-LLM's loop has (an abort is SGLang's: tests/sched/test_sglang.py)
    expected += [f"event: {kind}" for kind in EVENT_KINDS if kind != "aborted"]
    expected += [
        f"build: {value}"
        for value in [*ADMISSION_POLICIES, *WIDTH_POLICIES, "hybrid", "attention only"]
    ]
    missing = [name for name in expected if not ran[name]]
    assert not missing, f"never reached: {missing}; reached: {dict(ran)}"


def test_found_by_the_fuzzer_capacity_admission_without_recompute_pause_deadlocks():
    """The shrunk program of a long run (seed 1011): both requests fit the pool alone and are
    admitted; together they do not. With recompute pause off and a host tier of 4 pages, r0's
    growth suspends r1, whose 5 pages cannot move down, so nothing is freed and r0 suspends
    itself (progress, by the stall detector's count); the pool stays full, so neither may
    resume (utilization above max_util_for_resume) and the next pass stalls: the deadlock,
    with both requests alive."""
    from kvlab import simulate

    mgr = build_manager(
        tokens_per_block=1,
        blocks=8,
        max_seq_len=3,
        slots=2,
        width_policy="clamped",
        extra=1,
        hybrid=False,
        resident=1,
        host=4,
    )
    sched = Scheduler(
        mgr,
        admission="capacity",
        max_num_tokens=5,
        max_batch_size=2,
        stall_limit=1,
        enable_recompute_pause=False,
    )
    result = simulate(sched, [Request("r0", 1, 3), Request("r1", 4, 2)], max_steps=300)
    assert isinstance(result.error, SchedulerDeadlock) and result.iterations == 4
    assert result.status == {"r0": "running", "r1": "running"}
    r0, r1 = result.requests["r0"], result.requests["r1"]
    assert (r0.num_generated, r1.num_generated) == (2, 1)
    assert (r0.state, r1.state) == ("suspended", "suspended")
    assert r0.num_suspensions == r1.num_suspensions == 1 and mgr.host_tier.used_blocks == 0
