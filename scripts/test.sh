#!/usr/bin/env bash
# Set up (with the test and browser extras, and the real vLLM and SGLang schedulers' own
# environments) and run the whole test suite, browser tests and the live engine tests included.
#
#   bash scripts/test.sh [PYTEST ARGS...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh test,ui
bash scripts/setup.sh vllm
bash scripts/setup.sh sglang

status=0
python3 -m pytest -q -p no:cacheprovider "$@" || status=$?
if [ "$status" -eq 5 ]; then
    echo "test.sh: pytest collected no tests; that is a failure, not a pass" >&2
fi
exit "$status"
