#!/usr/bin/env bash
# Build (once) the Python 3.12 environment that LeRobot policies are served from, and print its path.
#
#   bash scripts/lerobot-env.sh            # -> ~/.cache/evalfleet/venvs/lerobot-0.6.1
#
# Why a separate environment: lerobot 0.6.1 needs Python >= 3.12 and pins torch<2.12, metaworld==3.0.0 and
# numpy<2.3, none of which evalfleet's own environment has to agree with. The policy's server
# (`evalfleet serve lerobot_local --protocol openpi`) runs in this venv; the simulator stays in evalfleet's.
# The venv lives outside the clone ($EVALFLEET_CACHE, default ~/.cache/evalfleet) so every clone and every
# rerun shares it. Idempotent: a venv whose marker file names this exact recipe is reused untouched; a half-built
# one (no marker) is removed and rebuilt.
set -euo pipefail
cd "$(dirname "$0")/.."

LEROBOT_VERSION=0.6.1
CACHE="${EVALFLEET_CACHE:-$HOME/.cache/evalfleet}"
VENV="${EVALFLEET_LEROBOT_VENV:-$CACHE/venvs/lerobot-$LEROBOT_VERSION}"
# What the venv must hold. `pusht` brings gym-pusht for `lerobot-eval --env.type=pusht` (bench), `diffusion` diffusers; the rest is what
# evalfleet imports here, at versions lerobot accepts: its server side, and `evalfleet run` itself (matplotlib for the
# plots), which runs a checkpoint in-process (`type: lerobot_local`) on an environment this venv also has, Push-T.
# Changing this line rebuilds the venv.
REQUIREMENTS=("lerobot[pusht,diffusion]==$LEROBOT_VERSION" "msgpack>=1.0,<2" "websockets>=13,<18" "pydantic>=2.7,<3"
  "PyYAML>=6.0,<7" "numpy>=1.26,<2.3" "rich>=13,<16" "packaging>=23" "pillow>=9.4" "matplotlib>=3.8,<4")
RECIPE="${REQUIREMENTS[*]}"
MARKER="$VENV/.evalfleet-recipe"
# One build at a time: a second caller waits here, then finds the venv built and reuses it.
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9

find_python312() {
  if [ -n "${EVALFLEET_PYTHON312:-}" ]; then echo "$EVALFLEET_PYTHON312"; return; fi
  local candidate
  for candidate in python3.12 "$(pyenv prefix 3.12 2>/dev/null | head -1)/bin/python3.12" \
      "$HOME"/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12 /usr/local/bin/python3.12; do
    if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; then
      command -v "$candidate" || echo "$candidate"; return
    fi
  done
  echo "scripts/lerobot-env.sh: no Python 3.12 found (lerobot $LEROBOT_VERSION needs it); install one" \
    "(e.g. 'pyenv install 3.12') or set EVALFLEET_PYTHON312=/path/to/python3.12" >&2
  exit 2
}

if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$RECIPE" ] && "$VENV/bin/python" -c 'import lerobot, evalfleet' 2>/dev/null; then
  # Reused as is; evalfleet is reinstalled (seconds, no dependencies) so the venv serves this clone's code.
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall . >/dev/null
  echo "$VENV"
  exit 0
fi

PYTHON312="$(find_python312)"
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
echo "building $VENV with $PYTHON312 (lerobot $LEROBOT_VERSION, torch: a ~3 GB download)" >&2
"$PYTHON312" -m venv "$VENV"
export PIP_DISABLE_PIP_VERSION_CHECK=1
"$VENV/bin/python" -m pip install -q --upgrade pip >&2
"$VENV/bin/python" -m pip install -q "${REQUIREMENTS[@]}" >&2
# evalfleet itself without its dependencies: its metaworld/numpy pins are the simulator side's, not the server's.
"$VENV/bin/python" -m pip install -q --no-deps . >&2
"$VENV/bin/python" -c 'import lerobot, evalfleet.serving.openpi' >&2
echo "$RECIPE" > "$MARKER"
echo "$VENV"
