#!/usr/bin/env bash
# Install Chromium (the HTML report test, tests/test_report_html.py, renders
# `rlx inspect --html` pages headless) when it is missing. Debian / Ubuntu:
# apt-get; elsewhere say what is needed and fail.
set -euo pipefail
for b in chromium chromium-browser; do
  command -v "$b" >/dev/null 2>&1 && exit 0
done
if command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing chromium (the HTML report test renders pages headless)"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 \
    || { $SUDO apt-get update >/dev/null && $SUDO apt-get install -y --no-install-recommends chromium >/dev/null; }
fi
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || {
  echo "chromium is required for the HTML report test: install chromium" >&2
  exit 1
}
