#!/usr/bin/env bash
# Prepares .gpu/, what the GPU session (python -m benchmarks.gpu_session; its docstring has the whole procedure)
# carries to the device machine, in the checkout's root:
#   .gpu/whl/                      pydantic and the wheels it needs, for the device's CPython 3.12 on x86-64 Linux
#   .gpu/cifar10.tar.xz, .sha256   CIFAR-10's train/, train_rest/ and test/ JPEG folders ($HUB_DATA_DIR/cifar10);
#                                  xz, not gzip: 18.6 MB against 19.4, which saves one device call
#   .gpu/parts/cifar10.tar.xz.partNN  the archive cut into pieces that each fit in one device call beside the
#                                  checkout
#   .gpu/CALLS.txt                 the device calls, in order
# /.gpu/, /.gpu_stage/ (the device's staging folder) and /.gpu_aside/ are added to .git/info/exclude when missing:
# ignored paths travel only when a call carries them.
#
#   HUB_DATA_DIR=../shared/data bash benchmarks/gpu_pack.sh
#   bash benchmarks/gpu_pack.sh --aside     before the device calls
#   bash benchmarks/gpu_pack.sh --restore   after them
#
# A device call carries at most 64 MiB: the checkout (tracked and untracked-not-ignored files) and the carried
# paths. The shipped weights (*/pretrained/*.safetensors, 63 MiB of a 65 MiB checkout on 2026-12-06) alone fill it,
# and the GPU session trains from scratch: --aside moves them into .gpu_aside/ (ignored, so they stay here) and
# --restore moves them back, checked against git. The archive's parts are sized for the checkout without them.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

weights() { git ls-files -z -- '*/pretrained/*.safetensors'; }
if [ "${1:-}" = "--aside" ]; then
  [ ! -e .gpu_aside ] || { echo "gpu_pack: .gpu_aside/ exists: run --restore first" >&2; exit 1; }
  weights | while IFS= read -r -d '' path; do
    mkdir -p ".gpu_aside/$(dirname "$path")" && mv "$path" ".gpu_aside/$path"
  done
  echo "gpu_pack: the shipped weights are in .gpu_aside/; after the device calls: bash benchmarks/gpu_pack.sh --restore"
  exit 0
elif [ "${1:-}" = "--restore" ]; then
  [ -d .gpu_aside ] || { echo "gpu_pack: no .gpu_aside/ to restore" >&2; exit 1; }
  (cd .gpu_aside && find . -type f -print0) | while IFS= read -r -d '' path; do
    mv ".gpu_aside/$path" "$path"
  done
  find .gpu_aside -depth -type d -empty -delete
  git diff --quiet -- '*/pretrained/*.safetensors' || { echo "gpu_pack: restored weights differ from git" >&2; exit 1; }
  echo "gpu_pack: the shipped weights are back and match git"
  exit 0
fi
PYTHON=${PYTHON:-.venv/bin/python}
DATA_DIR=${HUB_DATA_DIR:-../shared/data}
LIMIT=$((64 * 1024 * 1024))  # one device call: the checkout and the carried paths
MARGIN=$((512 * 1024))  # for what the checkout gains before the session, and the .sha256 file

fail() { echo "gpu_pack: $*" >&2; exit 1; }

exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
for pattern in /.gpu/ /.gpu_stage/ /.gpu_aside/; do
  grep -qxF "$pattern" "$exclude" 2>/dev/null || echo "$pattern" >> "$exclude"
done

for folder in train train_rest test; do
  [ -d "$DATA_DIR/cifar10/$folder" ] || fail "$DATA_DIR/cifar10/$folder not found: set HUB_DATA_DIR to the folder holding cifar10/"
done

rm -rf .gpu/whl .gpu/parts
mkdir -p .gpu/whl .gpu/parts

# the wheels gpu_session.WHEELS names, at the versions of this checkout's environment
specs=$("$PYTHON" -c 'from importlib.metadata import version
from benchmarks.gpu_session import WHEELS
print(" ".join(f"{name}=={version(name)}" for name in WHEELS))')
echo "gpu_pack: downloading $specs"
# shellcheck disable=SC2086  # one argument per wheel
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .gpu/whl $specs || fail "pip download failed (no package index reachable?): the device needs $specs"

tar -C "$DATA_DIR" --sort=name --owner=0 --group=0 --numeric-owner --mode=u+w -cf - \
  cifar10/train cifar10/train_rest cifar10/test | xz -9 -T1 > .gpu/cifar10.tar.xz
sha256sum .gpu/cifar10.tar.xz | cut -d' ' -f1 > .gpu/cifar10.tar.xz.sha256

tree=$(git ls-files -z --cached --others --exclude-standard | "$PYTHON" -c 'import fnmatch, os, sys
paths = [p.decode() for p in sys.stdin.buffer.read().split(b"\0") if p]
print(sum(os.path.getsize(p) for p in paths if os.path.isfile(p) and not fnmatch.fnmatch(p, "*/pretrained/*.safetensors")))')
wheels=$(cat .gpu/whl/*.whl | wc -c)
room=$((LIMIT - tree - MARGIN))
[ "$room" -gt $((1024 * 1024)) ] || fail "the checkout is $tree bytes: under 1 MiB is left of a call's 64 MiB"
split -b "$room" -d -a 2 .gpu/cifar10.tar.xz .gpu/parts/cifar10.tar.xz.part
parts=(.gpu/parts/cifar10.tar.xz.part*)
last=${parts[-1]}
staged=("${parts[@]}")
final_carry='".gpu/whl", ".gpu/cifar10.tar.xz.sha256"'
final_copy=""
if [ $(($(wc -c < "$last") + wheels)) -le "$room" ]; then  # the last part travels with the wheels
  staged=("${parts[@]:0:${#parts[@]}-1}")
  final_carry="$final_carry, \"$last\""
  final_copy="mkdir -p .gpu_stage && cp $last .gpu_stage/ && "
fi

install="python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu/whl/*.whl && export PYTHONPATH=/tmp/site:\$PWD && PYTHONUNBUFFERED=1"
{
  echo "# Here, first: bash benchmarks/gpu_pack.sh --aside (the shipped weights out of the checkout that travels);"
  echo "# here, after the last call: bash benchmarks/gpu_pack.sh --restore."
  echo "#"
  echo "# The GPU session's device calls, in order and back to back: the machine stays warm 30 s after a call, and"
  echo "# the parts staged in .gpu_stage/ are lost with a machine that went cold (the session's sha256 check then"
  echo "# fails before anything runs: start again from call 1). Written by benchmarks/gpu_pack.sh for a checkout of"
  echo "# $tree bytes (each call carries at most $room bytes beside it); rerun it when the checkout has grown."
  n=1
  for part in "${staged[@]}"; do
    echo "$n. run(command=\"mkdir -p .gpu_stage && cp $part .gpu_stage/ && ls -l .gpu_stage\", carry=[\"$part\"], timeout_s=60)"
    n=$((n + 1))
  done
  echo "$n. run(command=\"${final_copy}${install} python3 -m benchmarks.gpu_session --out \$OUT --data-archive .gpu_stage/cifar10.tar.xz.part* --data-sha256 \$(cat .gpu/cifar10.tar.xz.sha256)\", carry=[$final_carry], timeout_s=600)"
  echo
  echo "# Slot Attention (python -m benchmarks.gpu_slot; its docstring), one call a session once the above is done:"
  echo "# the first call starts the run; after each, here: rm -rf .gpu/slot_state && mkdir -p .gpu/slot_state, then"
  echo "# copy the returned state.* files into it; the next calls resume it."
  echo "S1. run(command=\"${install} python3 -m benchmarks.gpu_slot --out \$OUT\", carry=[\".gpu/whl\"], timeout_s=600)"
  echo "S2. run(command=\"${install} python3 -m benchmarks.gpu_slot --out \$OUT --state .gpu/slot_state/state.tgz.part* --state-sha256 \$(cat .gpu/slot_state/state.sha256)\", carry=[\".gpu/whl\", \".gpu/slot_state\"], timeout_s=600)"
} > .gpu/CALLS.txt

echo "gpu_pack: checkout $tree bytes; room per call $room bytes"
echo "gpu_pack: .gpu/cifar10.tar.xz $(wc -c < .gpu/cifar10.tar.xz) bytes in ${#parts[@]} part(s); wheels $wheels bytes:"
ls -l .gpu/whl
echo "gpu_pack: the device calls (.gpu/CALLS.txt):"
cat .gpu/CALLS.txt
