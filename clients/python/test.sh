#!/usr/bin/env bash
# The Python client's test, from a clean machine: a venv under target/ with the pinned
# requirements, stubs generated afresh from proto/, the toolplane binary (built unless
# TOOLPLANE_BIN names one), then pytest, which starts `toolplane up` on free ports and drives a
# host-driven run through the client and the example agent loop.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
venv="$target/python-client-venv"
req=clients/python/requirements.txt

. scripts/lib/venv.sh
ensure_venv "$venv" "$req"

PYTHON="$venv/bin/python" clients/python/generate.sh

if [ -z "${TOOLPLANE_BIN:-}" ]; then
  cargo build --quiet --locked -p toolplane --bin toolplane
  export TOOLPLANE_BIN="$target/debug/toolplane"
fi

cd clients/python
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider tests
