#!/usr/bin/env bash
# Set up and run the main job: `kvlab walkthrough` executes the notebooks with papermill into
# build/ and prints what they found.
#
#   bash scripts/walkthrough.sh [WALKTHROUGH ARGS...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh notebooks
python3 -m kvlab walkthrough "$@"
