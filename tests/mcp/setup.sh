#!/usr/bin/env bash
# Creates tests/mcp/.venv with the official MCP Python SDK pinned in requirements.txt (from PyPI only),
# and tests/mcp/node_modules with the MCP Inspector CLI pinned in package-lock.json (from npm only;
# node and npm from Debian, no global installs). Idempotent: does nothing when both hold exactly those pins.
set -euo pipefail
cd "$(dirname "$0")"
# Tests run in parallel, and every setup script may install from apt, PyPI or npm: one at a time
# (two concurrent apt-get runs fail on dpkg's lock); the later ones then find everything in place.
exec 9>"${TMPDIR:-/tmp}/payonce-test-setup.lock"
flock 9

. ../pinned_venv.sh
.venv/bin/python -c "import mcp, importlib.metadata as m; print('mcp client ready:', m.version('mcp'))"

missing=()
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}"
fi
locked=$(node -p "require('./package-lock.json').packages['node_modules/@modelcontextprotocol/inspector'].version")
installed=$(node -p "try { require('./node_modules/@modelcontextprotocol/inspector/package.json').version } catch { '' }")
if [ "$locked" != "$installed" ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
echo "mcp inspector ready: $(node -p "require('./node_modules/@modelcontextprotocol/inspector/package.json').version")"
