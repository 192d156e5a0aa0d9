#!/usr/bin/env bash
# Install everything the tests need on a fresh machine, then run the whole test suite:
# Debian's chromium (the browser tests drive it; never a downloaded browser), a CJK font and
# an emoji font (so the screenshots show Chinese labels and the cards' marks, not boxes),
# docker-compose (checks compose.yaml), nginx and caddy (docs/deploy.md's reverse proxy
# examples run in front of gateway serve),
# then the project with its dev extras in .venv. Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

need_debian=()
command -v chromium >/dev/null 2>&1 || need_debian+=(chromium)
dpkg -s fonts-wqy-microhei >/dev/null 2>&1 || need_debian+=(fonts-wqy-microhei)
dpkg -s fonts-noto-color-emoji >/dev/null 2>&1 || need_debian+=(fonts-noto-color-emoji)
# Compose v1 validates compose.yaml against the Compose schema without a Docker engine.
command -v docker-compose >/dev/null 2>&1 || need_debian+=(docker-compose)
# The test runs its own nginx and caddy (foreground, free loopback ports), not the services.
PATH="$PATH:/usr/sbin:/sbin" command -v nginx >/dev/null 2>&1 || need_debian+=(nginx)
command -v caddy >/dev/null 2>&1 || need_debian+=(caddy)
if [ "${#need_debian[@]}" -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian packages: ${need_debian[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need_debian[@]}" >/dev/null
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    echo "installing Debian packages with sudo: ${need_debian[*]}" >&2
    sudo DEBIAN_FRONTEND=noninteractive apt-get update -qq
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_debian[@]}" >/dev/null
  else
    echo "missing Debian packages: ${need_debian[*]}" >&2
    echo "install them first: sudo apt-get install ${need_debian[*]}" >&2
    exit 2
  fi
fi

python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
exec .venv/bin/python -m pytest "$@"
