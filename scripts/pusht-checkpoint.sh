#!/usr/bin/env bash
# Build (once) a trained LeRobot ACT checkpoint for Push-T and print its folder:
#
#   bash scripts/pusht-checkpoint.sh          # -> ~/.cache/evalfleet/checkpoints/pusht-act-<recipe>
#
# `~/.cache/evalfleet/checkpoints/pusht-act` is a link to the newest build, the path examples/pusht_act.yaml names.
#
# scripts/pusht_act_checkpoint.py runs in LeRobot's venv (scripts/lerobot-env.sh builds it) with this checkout's
# evalfleet: `evalfleet run scripts/pusht_demonstrations.yaml` plays evalfleet's Push-T planner with trajectory
# recording (both cores), the successful episodes are exported as a LeRobotDataset (kept as <folder>/demonstrations),
# and ACT is trained on the first 600 of them on the CPU (~4 min in all on 2 cores). Its success rate sits clearly
# between 0 and 1 (about a third of the episodes), which is what a side-by-side with lerobot-eval needs
# (bench/lerobot_side_by_side.py; examples/pusht_act.yaml evaluates it). The folder is named by a hash of the
# files that decide its numbers (below), so editing one builds a new one; it is written under a temporary name and
# moved into place when complete, so an interrupted build is never reused.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${EVALFLEET_CACHE:-$HOME/.cache/evalfleet}"
# The recipe: the training script and the Experiment, and what makes the demonstrations' numbers: the planner and
# its policy type, the Push-T environment and the action noise it adds, the episode seeds, what a recorded frame
# is. (The runner and the dataset writer only carry the frames; their tests check them against what was sent.)
RECIPE_FILES=(scripts/pusht_act_checkpoint.py scripts/pusht_demonstrations.yaml
  src/evalfleet/policies/pusht_planner.py src/evalfleet/policies/builtin.py src/evalfleet/sim/pusht_env.py
  src/evalfleet/sim/gymnasium_env.py src/evalfleet/sim/noise.py src/evalfleet/experiment/plan.py
  src/evalfleet/seeding.py src/evalfleet/rollout/trajectory.py)
RECIPE="$(cat "${RECIPE_FILES[@]}" | sha256sum | cut -c1-12)"
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
echo "building $OUT (Push-T demonstrations through evalfleet, then ACT on the CPU: ~4 min on 2 cores)" >&2
# This checkout's evalfleet, whichever copy the shared venv has installed.
PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" "$VENV/bin/python" -P scripts/pusht_act_checkpoint.py "$PARTIAL" >&2
rm -rf "$OUT"
mv "$PARTIAL" "$OUT"
link_and_print
