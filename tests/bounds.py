"""Time bounds the tests share: bounds on a hang, never speed targets.

The suite must pass on 2 cores beside a parallel CPU load of 4 (issue 44), which makes a run
about five times slower than on a quiet machine: a subprocess whose bound was sized to the quiet
machine (the conformance catalogue's run of every ported test, 110 s quiet, against 600 s) then
fails though nothing hung. Speed lives in the benchmarks.
"""

#: Seconds a test's subprocess may run before it is called hung.
HANG_S = 1800
