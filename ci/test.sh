#!/usr/bin/env bash
# The test command of the README: installs pymq with everything its tests need, then runs them.
#  - pymq (the distribution pymq-store) with the dev extra, every extra in one build of the
#    core: server, spark, bench and test (PySpark, the official RocketMQ 5 Python client, ...)
#  - ali-ons, RocketMQ 4's JavaScript client, from npm (needs node and npm)
#  - rocketmq-client-nodejs, RocketMQ 5's official Node.js client (gRPC), from npm
#  - rocketmq 0.4.4, RocketMQ 4's C++ client as a Python wheel, in its own directory: its
#    module name clashes with the 5.x client's, so the tests run it in subprocesses
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --upgrade pip
# an install made before the rename (distribution "pymq", or the index's unrelated pymq)
# maps the same import name: remove it first ("not installed" is fine)
python -m pip uninstall --quiet --yes pymq || true
python -m pip install --quiet -e ".[dev]"
(cd tests/remoting/js && npm ci --no-audit --no-fund --loglevel=error)
(cd tests/server/js && npm ci --no-audit --no-fund --loglevel=error)
python -m pip install --quiet --upgrade --target tests/remoting/.deps/rocketmq4 "rocketmq==0.4.4"
# the reference Apache RocketMQ 4.9.7 of the parity suite (tests/parity) and the real-broker
# tests, where this workplace keeps it; a user points PYMQ_ROCKETMQ_HOME at their own
if [ -z "${PYMQ_ROCKETMQ_HOME:-}" ] && [ -d ../shared/rocketmq-4.9.7 ]; then
  export PYMQ_ROCKETMQ_HOME=$(cd ../shared/rocketmq-4.9.7 && pwd)
fi
python -m pytest -q "$@"
