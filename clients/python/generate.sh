#!/usr/bin/env bash
# Generates the Python gRPC stubs from the wire contract in proto/ with grpcio-tools, into
# clients/python/toolplane/ (package `toolplane.v1`, mirroring the proto package). The stubs are
# build output, not source: they are not committed, and this script makes them afresh each time.
#   PYTHON=<interpreter with grpcio-tools>  clients/python/generate.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
python="${PYTHON:-python3}"

if ! "$python" -c 'import grpc_tools.protoc' 2>/dev/null; then
  echo "generate.sh: $python has no grpcio-tools; install it: pip install -r clients/python/requirements.txt" >&2
  exit 1
fi

rm -rf "$here/toolplane"
mapfile -t protos < <(cd "$root/proto" && find toolplane -name '*.proto' | sort)
"$python" -m grpc_tools.protoc -I "$root/proto" \
  --python_out="$here" --grpc_python_out="$here" --pyi_out="$here" "${protos[@]}"
# Regular packages, so the stubs install and import like any other code.
find "$here/toolplane" -type d -exec touch {}/__init__.py \;
echo "generated $(find "$here/toolplane" -name '*_pb2.py' | wc -l) modules into $here/toolplane"
