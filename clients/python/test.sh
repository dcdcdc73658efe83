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

if [ ! -x "$venv/bin/python" ] || ! cmp -s "$req" "$venv/.requirements"; then
  echo "installing $req into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$req"
  cp "$req" "$venv/.requirements"
fi

PYTHON="$venv/bin/python" clients/python/generate.sh

if [ -z "${TOOLPLANE_BIN:-}" ]; then
  cargo build --quiet --locked -p toolplane --bin toolplane
  export TOOLPLANE_BIN="$target/debug/toolplane"
fi

cd clients/python
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider tests
