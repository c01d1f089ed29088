# Sourced by the setup scripts of tests/*/: makes ./.venv hold exactly the pins of ./requirements.txt
# (from PyPI only). Idempotent: does nothing when the venv already holds exactly those pins.
# Tests that find the stamp missing run their setup script themselves, several at once under nextest:
# the first to lock this folder installs, the others wait and then find the pins in place. The lock is
# held until the sourcing script exits, so its own later steps (npm ci) are serialized too.
exec 9<.
flock 9
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  if ! "$PYTHON" -m venv .venv 2>/dev/null; then
    # Debian's python3 ships venv separately.
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq python3-venv
    rm -rf .venv
    "$PYTHON" -m venv .venv
  fi
fi

want=$(grep -v '^#' requirements.txt | sed '/^$/d' | tr 'A-Z_' 'a-z-' | sort)
have=$(.venv/bin/pip freeze 2>/dev/null | tr 'A-Z_' 'a-z-' | sort)
if [ "$want" != "$have" ]; then
  .venv/bin/pip install --quiet --disable-pip-version-check --no-input -r requirements.txt
fi
# The stamp the integration tests read (support::pinned_python): these pins are installed. A file
# comparison is all a test pays to know, instead of an interpreter start-up and an import.
cp requirements.txt .venv/pins
