#!/usr/bin/env bash
# Install everything the test suite needs, then run it: `bash scripts/test.sh [pytest args]`.
# Used by the README and by CI (.ci/run). Idempotent: reruns only check what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

export PIP_DISABLE_PIP_VERSION_CHECK=1
python3 -m pip install -q --root-user-action=ignore -e '.[test]'
# openpi-client (the real peer of our openpi server) declares numpy<2: install it without its
# dependencies so the project's numpy stays; what it imports (msgpack, websockets,
# typing_extensions) comes with evalfleet's own and the test extras.
python3 -m pip install -q --root-user-action=ignore --no-deps 'openpi-client==0.1.2'
# openpi-server (openpi's own WebsocketPolicyServer, the real peer of our openpi client) needs only
# openpi-client and websockets, but resolving it would pull openpi-client's numpy<2: no deps here too.
python3 -m pip install -q --root-user-action=ignore --no-deps 'openpi-server==0.1.0'
# Debian's chromium drives the browser tests of the HTML report (Playwright's own download cannot work);
# Mesa's EGL/OSMesa render MuJoCo cameras offscreen on the CPU.
bash scripts/install-chromium.sh >/dev/null
bash scripts/install-render-deps.sh >/dev/null

# LeRobot's own Python 3.12 venv (lerobot 0.6.1 + torch; ~2.5 min and 5.7 GB on first build, cached in
# ~/.cache/evalfleet/venvs and reused after) for tests/lerobot_policies; EVALFLEET_LEROBOT=0 skips it and
# those tests skip, saying why.
if [ "${EVALFLEET_LEROBOT:-1}" != "0" ]; then
  bash scripts/lerobot-env.sh >/dev/null
  # The trained Push-T ACT checkpoint the agreement test plays (~4 min on first build, cached beside the venv).
  bash scripts/pusht-checkpoint.sh >/dev/null
fi

# The pinned linter (ruff, from the test extra; configured in pyproject.toml): a lint error fails here.
python3 -m ruff check src tests bench examples

export MPLBACKEND=Agg
exec python3 -m pytest "$@"
