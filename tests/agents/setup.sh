#!/usr/bin/env bash
# Creates tests/agents/.venv with the official OpenAI and Anthropic Python SDKs pinned in
# requirements.txt (from PyPI only). Idempotent: does nothing when the venv holds exactly those pins.
set -euo pipefail
cd "$(dirname "$0")"

. ../pinned_venv.sh
.venv/bin/python -c "import importlib.metadata as m; print('agent SDKs ready: openai', m.version('openai'), 'anthropic', m.version('anthropic'))"
