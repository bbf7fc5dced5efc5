#!/usr/bin/env bash
# The test command of the README: installs pymq with everything its tests need, then runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -e ".[test]"
python -m pytest -q "$@"
