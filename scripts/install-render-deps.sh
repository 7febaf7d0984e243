#!/usr/bin/env bash
# Installs what offscreen MuJoCo rendering needs on Debian/Ubuntu: Mesa's EGL (the default backend,
# software llvmpipe when there is no GPU) and OSMesa (the fallback), plus PyAV for mp4 recording (its
# wheels carry FFmpeg's libraries with libx264). Idempotent: installs only what is missing.
set -euo pipefail

need=()
for pkg in libegl1 libegl-mesa0 libgl1-mesa-dri libosmesa6; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if ((${#need[@]})); then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "install-render-deps: apt-get install ${need[*]}"
  $SUDO apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

PY="${PYTHON:-python}"
if ! "$PY" -c "import av" 2>/dev/null; then
  echo "install-render-deps: pip install av"
  "$PY" -m pip install -q "av>=14,<19"
fi
echo "install-render-deps: ok"
