#!/usr/bin/env bash
# Creates tests/stripe/.venv with the official Stripe Python library pinned in
# requirements.txt (from PyPI only). Idempotent: does nothing when the venv holds exactly those pins.
set -euo pipefail
cd "$(dirname "$0")"

. ../pinned_venv.sh
.venv/bin/python -c "import importlib.metadata as m; print('stripe client ready:', m.version('stripe'))"
