#!/usr/bin/env bash
# Set up kvlab in the current Python environment. Idempotent: run it as often as you like.
#
#   bash scripts/setup.sh [EXTRAS]     EXTRAS: extras of pyproject.toml, comma-separated
#                                      (default "notebooks"; the tests use "test,ui")
#   bash scripts/setup.sh vllm         the real vLLM 0.34.0 scheduler's own environment, for
#                                      kvlab.backends.vllm (a cache folder, made once: about
#                                      7 GB and a few minutes; see engine_env below)
#   bash scripts/setup.sh sglang       the same for SGLang 0.5.23 (about 6 GB, a minute or two)
#
# pyproject.toml is the one source of truth for the dependencies; this script only decides how
# torch is installed, fetches the system Chromium for the browser test, and registers the
# Jupyter kernel the notebooks name.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
extras="${1:-notebooks}"

# A real engine pins its own torch (vLLM 0.34.0 2.14.0, SGLang 0.5.23 2.14.1), so it cannot share
# kvlab's environment: each gets a virtual environment of its own in a cache folder, made once and
# reused (kvlab.backends.real_engine finds it at the same path and talks to it through a
# subprocess). The engine's wheel is installed without its dependencies: they include GPU-only
# kernel packages (vLLM pins flashinfer-python 0.7.3, which the registry does not serve);
# scripts/NAME-requirements.txt lists the rest, pinned.
engine_env() {  # NAME VERSION MODULE: make (or find cached) the environment of engine NAME
    local name="$1" version="$2" module="$3"
    local override="KVLAB_$(echo "$name" | tr '[:lower:]' '[:upper:]')_ENV"
    local env_dir="${!override:-${XDG_CACHE_HOME:-$HOME/.cache}/kvlab/$name-$version}"
    local requirements="scripts/$name-requirements.txt" ready="$env_dir/kvlab-ready"
    if [ -f "$ready" ] && cmp -s "$ready" "$requirements"; then
        echo "setup.sh: the $name environment is ready (cached) in $env_dir"
        return
    fi
    if [ -e "$env_dir" ] && [ ! -f "$env_dir/pyvenv.cfg" ]; then
        echo "setup.sh: $env_dir exists and is not a virtual environment; not replacing it" >&2
        exit 1
    fi
    rm -rf "$env_dir"  # an environment made before, or half made: made anew
    python3 -m venv "$env_dir"
    "$env_dir/bin/python" -m pip install --quiet --no-deps "$name==$version"
    "$env_dir/bin/python" -m pip install --quiet -r "$requirements"
    "$env_dir/bin/python" -c "import $module" 2>/dev/null \
        || { echo "setup.sh: $name does not import in $env_dir" >&2; exit 1; }
    cp "$requirements" "$ready"
    echo "setup.sh: the $name environment is ready in $env_dir ($(du -sh "$env_dir" | cut -f1))"
}

case "$extras" in
    vllm) engine_env vllm 0.34.0 vllm.v1.core.sched.scheduler; exit 0 ;;
    sglang) engine_env sglang 0.5.23 sglang.srt.managers.scheduler; exit 0 ;;
esac

# Never into the operating system's own Python (kvlab.doctor.install_refusal says why and what
# to run instead): a virtual environment first, as the README's quick start makes one.
python3 -c 'import sys; from kvlab.doctor import install_refusal; sys.exit(install_refusal())'

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
