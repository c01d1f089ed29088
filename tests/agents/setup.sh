#!/usr/bin/env bash
# Creates tests/agents/.venv with the official OpenAI and Anthropic Python SDKs pinned in
# requirements.txt (from PyPI only). Idempotent: does nothing when the venv holds exactly those pins.
set -euo pipefail
cd "$(dirname "$0")"
# Tests run in parallel, and every setup script may install from apt, PyPI or npm: one at a time
# (two concurrent apt-get runs fail on dpkg's lock); the later ones then find everything in place.
exec 9>"${TMPDIR:-/tmp}/payonce-test-setup.lock"
flock 9

. ../pinned_venv.sh
.venv/bin/python -c "import importlib.metadata as m; print('agent SDKs ready: openai', m.version('openai'), 'anthropic', m.version('anthropic'))"
