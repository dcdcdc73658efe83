#!/usr/bin/env bash
# The Python client's test, as a user installs it. For each interpreter — Python 3.10, the oldest
# the package supports, and the newest one on the machine — a clean venv under target/, the
# package and its test extra installed with one pip command (which generates the stubs from proto/
# while it builds), then pytest, which starts `toolplane up` on free ports (the binary is built
# unless TOOLPLANE_BIN names one) and runs the tests against the installed package.
#   TOOLPLANE_PYTHONS="/usr/bin/python3.11 …"   test on these interpreters instead
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
# pip's cache (also that of the isolated build environments) lives under target/, like every
# other build output: nothing is cached elsewhere.
export PIP_CACHE_DIR="$target/pip-cache" PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

# The first working interpreter of Python 3.<minor>: on PATH, then pyenv's, then the system's.
python_of() {
  local minor=$1 candidate
  for candidate in "$(command -v "python3.$minor" || true)" \
    $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/3.$minor".*/bin/python 2>/dev/null | sort -V -r) \
    "/usr/local/bin/python3.$minor" "/usr/bin/python3.$minor"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ] && "$candidate" -c 'import venv, ensurepip' 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

if [ -n "${TOOLPLANE_PYTHONS:-}" ]; then
  read -r -a pythons <<<"$TOOLPLANE_PYTHONS"
else
  pythons=()
  if oldest=$(python_of 10); then
    pythons+=("$oldest")
  else
    echo "clients/python/test.sh: no Python 3.10 on this machine (PATH, pyenv, /usr/bin); the oldest supported version goes untested" >&2
  fi
  for minor in $(seq 30 -1 11); do
    if newest=$(python_of "$minor"); then
      pythons+=("$newest")
      break
    fi
  done
fi
if [ ${#pythons[@]} -eq 0 ]; then
  echo "clients/python/test.sh: no Python 3.10 or newer found" >&2
  exit 1
fi

if [ -z "${TOOLPLANE_BIN:-}" ]; then
  cargo build --quiet --locked -p toolplane --bin toolplane
  export TOOLPLANE_BIN="$target/debug/toolplane"
fi

# Each interpreter gets its own copy of the checkout's clients/python with proto/ beside it (a
# symlink), the layout setup.py reads: pip builds a local directory in place (build/, egg-info) and
# the editable-install test writes stubs into the source, so two interpreters sharing one source
# tree would race. With that, the interpreters run at once — each pytest session starts its own
# `toolplane up` on ports the system picks — and their output is printed in order once both ended.
last=${pythons[${#pythons[@]}-1]}
run_one() {
  local python=$1 version=$2 venv=$3 checkout=$4
  echo "== Python $version ($python): clean venv $venv, pip install ./clients/python[test]"
  rm -rf "$venv" "$checkout"
  mkdir -p "$checkout/clients"
  cp -R "$root/clients/python" "$checkout/clients/python"
  rm -rf "$checkout"/clients/python/{build,toolplane,toolplane_client.egg-info}
  ln -s "$root/proto" "$checkout/proto"
  "$python" -m venv "$venv"
  # No byte-compiling of every installed module (the OpenAI SDK has thousands): only what runs.
  "$venv/bin/python" -m pip install --quiet --no-compile "$checkout/clients/python[test]"
  # The tests that build the package itself (`packaging`: sdist, wheel from it, editable install)
  # run once, on the last interpreter; the install above has built it with each interpreter.
  local selection=()
  if [ "$python" != "$last" ]; then
    selection=(-m "not packaging")
  fi
  # From inside the venv, so nothing imports the source tree instead of the installed package.
  (cd "$venv" && "$venv/bin/python" -m pytest -q -p no:cacheprovider "${selection[@]}" \
    --rootdir "$checkout/clients/python" "$checkout/clients/python/tests")
}

pids=() logs=()
for python in "${pythons[@]}"; do
  version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  log="$target/python-client-$version.log"
  run_one "$python" "$version" "$target/python-client-venv-$version" "$target/python-client-checkout-$version" >"$log" 2>&1 &
  pids+=("$!") logs+=("$log")
done
status=0
for i in "${!pids[@]}"; do
  failed=0
  wait "${pids[$i]}" || failed=1
  cat "${logs[$i]}"
  if [ "$failed" = 1 ]; then
    echo "clients/python/test.sh: ${pythons[$i]} failed (log above, kept in ${logs[$i]})" >&2
    status=1
  fi
done
exit "$status"
