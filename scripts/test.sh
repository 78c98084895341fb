#!/usr/bin/env bash
# Set up and run kvlab's tests.
#
#   bash scripts/test.sh [PYTEST ARGS...]           the full suite: sets up the test and browser
#                                                   extras and the real vLLM and SGLang schedulers'
#                                                   own environments, then runs every test (CI's)
#   bash scripts/test.sh --quick [PYTEST ARGS...]   the edit-test loop: the unit tests only, on
#                                                   every core, without notebooks, the browser,
#                                                   the engine environments or slow tests
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ "${1:-}" = "--quick" ]; then
    shift
    # set up once; later quick runs go straight to the tests
    python3 -c 'import kvlab, xdist, hypothesis' 2>/dev/null || bash scripts/setup.sh test
    status=0
    python3 -m pytest -q -p no:cacheprovider -n auto --dist loadfile \
        -m "not notebook and not ui and not vllm and not sglang and not slow and not gpu" \
        "$@" || status=$?
else
    bash scripts/setup.sh dev
    bash scripts/setup.sh vllm
    bash scripts/setup.sh sglang
    status=0
    python3 -m pytest -q -p no:cacheprovider "$@" || status=$?
fi
if [ "$status" -eq 5 ]; then
    echo "test.sh: pytest collected no tests; that is a failure, not a pass" >&2
fi
exit "$status"
