#!/usr/bin/env bash
# Build (once) a trained LeRobot ACT checkpoint for Push-T and print its folder:
#
#   bash scripts/pusht-checkpoint.sh          # -> ~/.cache/evalfleet/checkpoints/pusht-act-<recipe>
#
# `~/.cache/evalfleet/checkpoints/pusht-act` is a link to the newest build, the path examples/pusht_act.yaml names.
#
# scripts/pusht_act_checkpoint.py runs in LeRobot's venv (scripts/lerobot-env.sh builds it): demonstrations by
# evalfleet's Push-T planner, then ACT trained on the CPU (~5 min on 2 cores). Its success rate sits clearly
# between 0 and 1 (about 30% of the episodes), which is what a side-by-side with lerobot-eval needs
# (bench/lerobot_side_by_side.py; examples/pusht_act.yaml evaluates it). The folder is named by a hash of the
# two files that make it, so editing either builds a new one; it is written under a temporary name and moved
# into place when complete, so an interrupted build is never reused.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${EVALFLEET_CACHE:-$HOME/.cache/evalfleet}"
RECIPE="$(cat scripts/pusht_act_checkpoint.py src/evalfleet/policies/pusht_planner.py | sha256sum | cut -c1-12)"
OUT="$CACHE/checkpoints/pusht-act-$RECIPE"

link_and_print() {  # the stable name examples use, switched atomically to this build
  ln -sfn "$(basename "$OUT")" "$CACHE/checkpoints/pusht-act.new" && mv -T "$CACHE/checkpoints/pusht-act.new" \
    "$CACHE/checkpoints/pusht-act"
  echo "$OUT"
}

mkdir -p "$CACHE/checkpoints"
exec 9>"$CACHE/checkpoints/.pusht-act.lock"  # one build at a time; a second caller waits, then reuses it
flock 9
if [ -f "$OUT/training.json" ] && [ -f "$OUT/model.safetensors" ]; then
  link_and_print
  exit 0
fi

VENV="$(bash scripts/lerobot-env.sh)"
PARTIAL="$OUT.partial-$$"
trap 'rm -rf "$PARTIAL"' EXIT
echo "building $OUT (Push-T demonstrations, then ACT on the CPU: ~5 min on 2 cores)" >&2
"$VENV/bin/python" -P scripts/pusht_act_checkpoint.py "$PARTIAL" >&2
rm -rf "$OUT"
mv "$PARTIAL" "$OUT"
link_and_print
