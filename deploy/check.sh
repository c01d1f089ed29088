#!/usr/bin/env bash
# Validates deploy/ offline (no container engine, no cluster):
#   - compose.yaml against the compose-spec JSON schema (check-jsonschema's bundled copy);
#   - k8s/*.yaml against Kubernetes' own API schemas, strictly (kubernetes-validate's bundled copies),
#     for the oldest and newest Kubernetes versions we claim;
#   - systemd/ units with `systemd-analyze verify`, where systemd is installed (any output is a finding);
#   - the cross-file rules in check_rules.py (probes, selectors, non-root, the sweep runs --once, ...).
# The validators are installed once, pinned, from PyPI into a cache venv; later runs take seconds.
#
#   deploy/check.sh              check deploy/
#   deploy/check.sh DIR          check a copy (same layout)
#   deploy/check.sh --self-test  break a copy in several ways; fail unless every break is caught
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${PAYONCE_DEPLOY_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/payonce-deploy-check/venv}"
pins="check-jsonschema==0.39.0 kubernetes-validate==1.37.0 PyYAML==6.0.3"
# Kubernetes versions the manifests must validate against: oldest supported, newest bundled.
k8s_versions="1.30.0 1.37.0"

install() {
  if [ -f "$venv/.pins" ] && [ "$(cat "$venv/.pins")" = "$pins" ]; then return; fi
  echo "deploy/check.sh: installing validators into $venv ($pins)"
  if ! python3 -m venv "$venv"; then
    # Debian's system python ships venv separately.
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt-get install -y -qq python3-venv >/dev/null && python3 -m venv "$venv"
    else
      echo "deploy/check.sh: python3 -m venv failed; install python3-venv" >&2; exit 1
    fi
  fi
  # shellcheck disable=SC2086 # the pins are separate words
  "$venv/bin/pip" install --quiet --disable-pip-version-check $pins
  echo "$pins" > "$venv/.pins"
}

check() {
  local dir="$1" failed=0 out
  "$venv/bin/check-jsonschema" --builtin-schema vendor.compose-spec "$dir/compose.yaml" >/dev/null \
    || { "$venv/bin/check-jsonschema" --builtin-schema vendor.compose-spec "$dir/compose.yaml" || true; failed=1; }
  for v in $k8s_versions; do
    "$venv/bin/kubernetes-validate" --strict --quiet -k "$v" "$dir"/k8s/*.yaml || failed=1
  done
  if command -v systemd-analyze >/dev/null; then
    # ExecStart must exist to verify; point the units at a stub instead of /usr/local/bin/payonce.
    local units
    units="$(mktemp -d)"
    printf '#!/bin/sh\n' > "$units/payonce" && chmod +x "$units/payonce"
    for f in "$dir"/systemd/*; do
      sed "s|/usr/local/bin/payonce|$units/payonce|g" "$f" > "$units/$(basename "$f")"
    done
    # verify exits 0 on unknown keys and bad values (it only warns): any output is a finding.
    out="$(systemd-analyze verify --man=no "$units"/*.service "$units"/*.timer 2>&1 || true)"
    rm -rf "$units"
    if [ -n "$out" ]; then echo "$out"; failed=1; fi
  else
    echo "deploy/check.sh: systemd-analyze not installed; systemd units checked by rules only"
  fi
  "$venv/bin/python" "$here/check_rules.py" "$dir" || failed=1
  return "$failed"
}

# Each line: file (relative to deploy/) | sed expression that breaks it | what must be caught.
mutations() {
  cat <<'EOF'
compose.yaml|s/    stop_grace_period: 40s/    stop_grace_periods: 40s/|unknown compose key
compose.yaml|s/      replicas: 2/      replicas: 1/|one worker in compose
compose.yaml|/^  reconciler:/,/^volumes:/{/healthcheck:/,/retries: 10/d}|reconciler without a healthcheck
k8s/worker.yaml|s/readinessProbe:/readinesProbe:/|misspelled probe field
k8s/worker.yaml|s/containerPort: 9090/containerPort: "9090"/|port of the wrong type
k8s/api.yaml|s/path: \/readyz/path: \/healthz/|readiness probe on the liveness path
k8s/pdb.yaml|s/component: worker/component: workers/|PDB selecting nothing
k8s/sweep-cronjob.yaml|s/"--once", //|sweep without --once
k8s/worker.yaml|s/args: \["worker"\]/args: ["migrate"]/|a serving pod that migrates
k8s/api.yaml|/readinessProbe:/,/failureThreshold:/s/failureThreshold: 2/failureThreshold: 20/|readiness too slow to see a broken pod
systemd/payonce-api.service|s/^TimeoutStopSec=/TimeoutStoSec=/|unknown systemd key
systemd/payonce-worker@.service|s/^User=payonce/User=root/|worker as root
Dockerfile|s/^USER 10001:10001/USER root/|image running as root
EOF
}

self_test() {
  local n=0 missed=0 copy file expr what
  while IFS='|' read -r file expr what; do
    n=$((n + 1))
    copy="$(mktemp -d)"
    cp -r "$here/." "$copy/"
    sed -i "$expr" "$copy/$file"
    if cmp -s "$here/$file" "$copy/$file"; then
      echo "self-test: mutation did not change $file ($what)"; missed=$((missed + 1))
    elif check "$copy" >/dev/null 2>&1; then
      echo "self-test: NOT caught: $what ($file)"; missed=$((missed + 1))
    else
      echo "self-test: caught: $what"
    fi
    rm -rf "$copy"
  done < <(mutations)
  echo "self-test: $((n - missed)) of $n broken copies caught"
  [ "$missed" -eq 0 ]
}

install
case "${1:-}" in
  --self-test) self_test ;;
  "") check "$here" && echo "deploy/check.sh: compose, Kubernetes (${k8s_versions// /, }), systemd and rules: ok" ;;
  *) check "$1" ;;
esac
