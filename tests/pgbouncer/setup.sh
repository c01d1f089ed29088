#!/usr/bin/env bash
# Installs PgBouncer from Debian's package for the pooler tests (tests/integration/poolers.rs), which
# start their own pgbouncer on a free port with a configuration of their own. Debian's service is
# never used: installed with services kept from starting, and left stopped. Idempotent: a second run
# changes nothing.
set -euo pipefail
cd "$(dirname "$0")"
# Tests run in parallel: the first to get here installs, the others wait for it and then find
# everything in place (two concurrent apt-get runs fail on dpkg's lock).
exec 9>"${TMPDIR:-/tmp}/payonce-test-setup.lock"
flock 9

if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ]; then
  export DEBIAN_FRONTEND=noninteractive
  # Keep the package's own service from starting (policy-rc.d exit 101: "action forbidden").
  policy=/usr/sbin/policy-rc.d
  created_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
    created_policy=1
  fi
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq pgbouncer
  if [ "$created_policy" = 1 ]; then rm -f "$policy"; fi
fi
echo "pgbouncer ready: $(/usr/sbin/pgbouncer --version | head -1)"
