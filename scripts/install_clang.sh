#!/usr/bin/env bash
# Install clang (for msl-sim: the Metal kernel tests compile .metal files
# with clang++) when it is missing. Debian / Ubuntu: apt-get; elsewhere
# say what is needed and fail.
set -euo pipefail
command -v clang++ >/dev/null 2>&1 && exit 0
if command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing clang (msl-sim needs clang++)"
  $SUDO apt-get install -y clang >/dev/null 2>&1 || { $SUDO apt-get update >/dev/null && $SUDO apt-get install -y clang >/dev/null; }
fi
command -v clang++ >/dev/null 2>&1 || {
  echo "clang++ is required for the Metal kernel tests (msl-sim): install clang" >&2
  exit 1
}
