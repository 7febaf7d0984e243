#!/usr/bin/env bash
# Build the documentation site from docs/ (Sphinx + MyST, theme furo) into outputs/site/, warnings as errors:
#
#   bash scripts/docs.sh [OUTPUT_DIR]        # then open outputs/site/index.html
#
# Sphinx and its packages live in a venv of their own (their docutils is newer than what some machines'
# packages pin), outside the clone ($EVALFLEET_CACHE, default ~/.cache/evalfleet), built once and reused; it sees
# this Python's packages, so the API pages import the evalfleet installed here. Offline: no extension fetches
# anything. -W --keep-going: every warning (a broken internal link, a missing page, a bad directive) is listed and
# fails the build; -n: so does a reference to a Python object the site does not document.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="${1:-outputs/site}"
CACHE="${EVALFLEET_CACHE:-$HOME/.cache/evalfleet}"
REQUIREMENTS=("sphinx==9.0.4" "myst-parser==5.2.0" "furo==2025.12.19")
RECIPE="${REQUIREMENTS[*]}"
VENV="$CACHE/venvs/docs-$(printf '%s' "$RECIPE" | sha256sum | cut -c1-12)"
MARKER="$VENV/.evalfleet-recipe"
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9
if [ ! -f "$MARKER" ] || [ "$(cat "$MARKER")" != "$RECIPE" ]; then
  rm -rf "$VENV"
  python3 -m venv --system-site-packages "$VENV"
  if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${REQUIREMENTS[@]}" > "$VENV.log" 2>&1; then
    cat "$VENV.log" >&2
    exit 1
  fi
  printf '%s' "$RECIPE" > "$MARKER"
fi
exec 9>&-
"$VENV/bin/python" -m sphinx -W --keep-going -n -q -E -a -b html docs "$OUT"
echo "site: $OUT/index.html"
