#!/usr/bin/env bash
# Set up kvlab in the current Python environment. Idempotent: run it as often as you like.
#
#   bash scripts/setup.sh [EXTRAS]     EXTRAS: extras of pyproject.toml, comma-separated
#                                      (default "notebooks"; the tests use "test,ui")
#   bash scripts/setup.sh vllm         the real vLLM 0.34.0 scheduler's own environment, for
#                                      kvlab.backends.vllm (a cache folder, made once: about
#                                      7 GB and a few minutes; see "vllm" below)
#
# pyproject.toml is the one source of truth for the dependencies; this script only decides how
# torch is installed, fetches the system Chromium for the browser test, and registers the
# Jupyter kernel the notebooks name.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
extras="${1:-notebooks}"

if [ "$extras" = vllm ]; then
    # vLLM pins its own torch (2.14.0), so it cannot share kvlab's environment: it gets a virtual
    # environment of its own in a cache folder, made once and reused (kvlab.backends.vllm finds
    # it at the same path and talks to it through a subprocess). The wheel is installed without
    # its dependencies because it pins flashinfer-python 0.7.3, which the registry does not
    # serve; scripts/vllm-requirements.txt lists the rest, less the GPU-only kernel packages.
    env_dir="${KVLAB_VLLM_ENV:-${XDG_CACHE_HOME:-$HOME/.cache}/kvlab/vllm-0.34.0}"
    ready="$env_dir/kvlab-ready"
    if [ -f "$ready" ] && cmp -s "$ready" scripts/vllm-requirements.txt; then
        echo "setup.sh: the vLLM environment is ready (cached) in $env_dir"
        exit 0
    fi
    rm -rf "$env_dir"
    python3 -m venv "$env_dir"
    "$env_dir/bin/python" -m pip install --quiet --no-deps "vllm==0.34.0"
    "$env_dir/bin/python" -m pip install --quiet -r scripts/vllm-requirements.txt
    "$env_dir/bin/python" -c "import vllm.v1.core.sched.scheduler" 2>/dev/null \
        || { echo "setup.sh: vLLM does not import in $env_dir" >&2; exit 1; }
    cp scripts/vllm-requirements.txt "$ready"
    echo "setup.sh: the vLLM environment is ready in $env_dir ($(du -sh "$env_dir" | cut -f1))"
    exit 0
fi

has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }
has_torch() {  # a torch that meets pyproject's torch>=2.4 is already installed
    python3 -c 'import sys, torch; sys.exit(tuple(map(int, torch.__version__.split(".")[:2])) < (2, 4))' \
        >/dev/null 2>&1
}

if ! has_gpu && ! has_torch; then
    # No NVIDIA GPU here: install the CPU build of torch before the project, so that resolving
    # pyproject's torch requirement finds it met and does not pull gigabytes of CUDA wheels.
    # Where your package index serves only the CUDA build, point pip at PyTorch's CPU wheel
    # index first with PIP_EXTRA_INDEX_URL (PyTorch's install instructions give it).
    echo "setup.sh: no NVIDIA GPU found; installing the CPU build of torch"
    python3 -m pip install "torch==2.13.0"
fi

python3 -m pip install -e ".[${extras}]"

case ",${extras}," in
    *,notebooks,* | *,test,* | *,ui,* | *,dev,* | *,all,*)
        # kaleido renders the walkthrough report's static figures with the system Chromium, and
        # the browser test drives the same browser through playwright (never `playwright
        # install`, never kaleido's Chrome download helpers).
        if [ ! -x /usr/bin/chromium ]; then
            if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
                apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium
            else
                echo "setup.sh: the browser test needs Chromium at /usr/bin/chromium;" \
                     "install it as root, e.g. 'apt-get install chromium'" >&2
            fi
        fi
        ;;
esac

# The notebooks name the kernel "python3"; ipykernel usually ships it, register it if not.
if python3 -c 'import ipykernel' >/dev/null 2>&1 \
        && ! python3 -m jupyter kernelspec list 2>/dev/null | grep -qE '^[[:space:]]*python3[[:space:]]'; then
    python3 -m ipykernel install --user --name python3
fi
echo "setup.sh: kvlab is set up with extras [${extras}]"
