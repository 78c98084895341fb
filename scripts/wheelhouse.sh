#!/usr/bin/env bash
# Download every wheel the workshop needs into one folder, for a room without network.
#
#   bash scripts/wheelhouse.sh [--dry-run] [--extras LIST] [FOLDER] [-- PIP-DOWNLOAD-OPTIONS]
#
#   FOLDER     where the wheels go (default build/wheelhouse, which git ignores)
#   --extras   pyproject.toml extras, comma-separated (default notebooks,test,ui: what setup.sh
#              installs for the workshop and for the tests)
#   --dry-run  print the pip commands, download nothing
#   -- ...     passed to `pip download`, to fetch for laptops unlike this machine, e.g.
#              -- --platform macosx_11_0_arm64 --python-version 3.11 --only-binary=:all:
#
# It downloads torch pinned as setup.sh pins it (the CPU build where the package index serves
# one), the build backend the editable install needs (setuptools), and every requirement of
# pyproject.toml's dependencies and extras, read from pyproject.toml (the one list). Then on
# each laptop, in the repository, with no network:
#
#   python3 -m pip install --no-index --find-links build/wheelhouse "torch==2.13.0"
#   python3 -m pip install --no-index --find-links build/wheelhouse -e ".[notebooks,test,ui]"
#   python3 -m ipykernel install --user --name python3
#
# Wheels are per operating system, CPU architecture and Python version: make one folder per
# kind of laptop in the room (the -- options above), and check it with `kvlab doctor`.
# Plain bash 3.2 is enough (macOS's /bin/bash).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

folder=build/wheelhouse extras=notebooks,test,ui dry_run=0 pip_options=()
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) dry_run=1 ;;
        --extras) extras="${2:?--extras needs a comma-separated list}"; shift ;;
        --) shift; pip_options=("$@"); break ;;
        -*) echo "wheelhouse.sh: unknown option $1 (see the comment at the top)" >&2; exit 2 ;;
        *) folder="$1" ;;
    esac
    shift
done

# The torch pin of setup.sh, read from it so that the two cannot disagree.
torch=$(sed -n 's/.*pip install "\(torch==[0-9.]*\)".*/\1/p' scripts/setup.sh)
[ -n "$torch" ] || { echo "wheelhouse.sh: no torch pin found in scripts/setup.sh" >&2; exit 1; }

# pyproject.toml's requirements for the extras, kvlab[...] self-references followed.
requirements=()
while IFS= read -r line; do requirements+=("$line"); done < <(python3 - "$extras" <<'EOF'
import re, sys, tomllib

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project["optional-dependencies"]
wanted, seen, out = sys.argv[1].split(","), set(), list(project["dependencies"])
while wanted:
    extra = wanted.pop()
    if extra in seen:
        continue
    if extra not in extras:
        sys.exit(f"wheelhouse.sh: pyproject.toml has no extra {extra!r}; it has {sorted(extras)}")
    seen.add(extra)
    for text in extras[extra]:
        inner = re.fullmatch(r"kvlab\[([\w,-]+)\]", text.replace(" ", ""))
        if inner:
            wanted.extend(inner.group(1).split(","))
        elif text not in out:
            out.append(text)
# torch comes pinned, as setup.sh installs it: its range here would fetch a second, newer torch.
print("\n".join(t for t in out if not re.match(r"torch\s*[<>=!~;\[]", t)))
EOF
)
[ ${#requirements[@]} -gt 0 ] || exit 1
build_backend=$(python3 -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))')

run() {
    if [ "$dry_run" = 1 ]; then printf '%q ' "$@"; echo; else "$@"; fi
}
run mkdir -p "$folder"
# torch alone first: on Linux the CPU build is named +cpu; the CUDA build would pull gigabytes of
# nvidia_* wheels with it.
run python3 -m pip download --dest "$folder" ${pip_options[@]+"${pip_options[@]}"} --no-deps "$torch"
if [ "$dry_run" = 0 ] && ls "$folder" | grep -E '^torch-.*linux' | grep -vq '+cpu'; then
    echo "wheelhouse.sh: the index served torch's CUDA build; set PIP_EXTRA_INDEX_URL to" \
         "PyTorch's CPU wheel index (PyTorch's install page gives it), delete the torch wheel" \
         "from $folder and run this again" >&2
    exit 1
fi
run python3 -m pip download --dest "$folder" ${pip_options[@]+"${pip_options[@]}"} "$torch" $build_backend "${requirements[@]}"

if [ "$dry_run" = 0 ]; then
    echo "wheelhouse.sh: $(ls "$folder" | wc -l) files, $(du -sh "$folder" | cut -f1) in $folder"
fi
echo "offline install, in the repository on each laptop:"
echo "  python3 -m pip install --no-index --find-links $folder \"$torch\""
echo "  python3 -m pip install --no-index --find-links $folder -e \".[$extras]\""
echo "  python3 -m ipykernel install --user --name python3"
