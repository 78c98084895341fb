#!/usr/bin/env bash
# The linters CI runs before the tests (set up by `bash scripts/setup.sh dev`): ruff's lint rules
# and its formatter, then mypy (strict on core, sched and run); all configured in pyproject.toml.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python3 -m ruff check .
python3 -m ruff format --check .
python3 -m mypy
