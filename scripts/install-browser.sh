#!/usr/bin/env bash
# Headless Chromium and its WebDriver, for the dashboard's browser test (tests/browser.rs):
# Debian's `chromium` and `chromium-driver`, which come as a version-locked pair. Does nothing
# when both are present and of one version; needs root (or sudo) and the Debian mirrors.
set -euo pipefail
major() { "$1" --version 2>/dev/null | grep -oE '[0-9]+\.' | head -1; }
if command -v chromium >/dev/null && command -v chromedriver >/dev/null \
    && [ -n "$(major chromium)" ] && [ "$(major chromium)" = "$(major chromedriver)" ]; then
    exit 0
fi
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium chromium-driver
$sudo apt-get clean
chromium --version
chromedriver --version
