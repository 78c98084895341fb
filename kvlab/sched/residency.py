"""The recurrent-state residency cap of PR #17261 (a proposal closed without merging;
REFERENCE.md §5), as the V2 scheduler applies it: a request that would take a new state slot (a
first context chunk, a DISAGG_GENERATION_INIT) is admitted only while fewer sequences hold one
than ``manager.max_resident_sequences()``. The review's fixes are the defaults here; each of its
scheduler findings is a subclass in kvlab.case_studies overriding one hook."""

from __future__ import annotations

from kvlab.core.request import LIVE_STATES, Request
from kvlab.sched.base import SchedulerBase
from kvlab.sched.context_plan import ScheduleAction


class ResidencyCap(SchedulerBase):
    """The cap's hooks, mixed into kvlab.sched.scheduler.Scheduler."""

    def _residency_refusal(self) -> ScheduleAction:
        """A first chunk refused at the cap SKIPs (the fix; BreakOnCapScheduler has the bug)."""
        return ScheduleAction.SKIP

    def _disagg_gen_init_under_cap(self) -> bool:
        """DISAGG_GENERATION_INIT requests are gated and counted (the fix;
        DisaggBypassScheduler has the bug)."""
        return True

    def _residency_full(self, request: Request) -> bool:
        """``request`` would take a new state slot and the cap is reached."""
        cap = self.manager.max_resident_sequences()
        if cap is None or request.request_id in self.manager.caches:
            return False
        return self.num_resident_sequences() >= cap

    def num_resident_sequences(self) -> int:
        """Live requests holding a cache, hence a state slot (suspended ones included)."""
        counts_disagg = self._disagg_gen_init_under_cap()
        return sum(
            1
            for r in self._active
            if r.state in LIVE_STATES
            and r.request_id in self.manager.caches
            and (counts_disagg or not r.is_disagg_generation_init)
        )
