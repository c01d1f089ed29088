#!/usr/bin/env bash
# Installs what the browser tests need, from the machine's package registries only:
# Debian's chromium (playwright's own browser download is never used), playwright-core and axe-core
# pinned in package-lock.json. Idempotent: a second run changes nothing.
set -euo pipefail
cd "$(dirname "$0")"
# Tests run in parallel: the first to get here installs, the others wait for it and then find
# everything in place (two concurrent apt-get runs fail on dpkg's lock).
exec 9>"${TMPDIR:-/tmp}/payonce-test-setup.lock"
flock 9

missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}"
fi

# Playwright must not try to download browsers of its own.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
# Each package pinned in package-lock.json (playwright-core, axe-core) must be installed at its pin.
stale=0
for pkg in playwright-core axe-core; do
  locked=$(node -p "require('./package-lock.json').packages['node_modules/$pkg'].version")
  installed=$(node -p "try { require('./node_modules/$pkg/package.json').version } catch { '' }")
  [ "$locked" = "$installed" ] || stale=1
done
if [ "$stale" = 1 ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi

/usr/bin/chromium --version >/dev/null 2>&1
echo "browser test prerequisites ready: $(/usr/bin/chromium --version 2>/dev/null | head -1), playwright-core $(node -p "require('./node_modules/playwright-core/package.json').version"), axe-core $(node -p "require('./node_modules/axe-core/package.json').version")"
