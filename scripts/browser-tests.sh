#!/usr/bin/env bash
# Install what the frontend extension's tests need, on Debian as root: Chromium (driven headless
# by Playwright; no browser download is possible or needed) and Node.js with npm (to rebuild the
# extension and compare it with the committed build). Idempotent.
#
#   sudo bash scripts/browser-tests.sh
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
    echo "browser-tests.sh: run as root (it installs packages)" >&2
    exit 1
fi

missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
    echo "+ apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
/usr/bin/chromium --version 2>/dev/null
echo "node $(node --version), npm $(npm --version)"
