# Sourced by the test scripts: `ensure_venv <dir> <requirements-file>` makes <dir> a Python
# virtual environment holding exactly the pinned requirements, rebuilt whenever the file changes
# (a copy of it in <dir>/.requirements is the stamp). On failure it says which step failed and
# how much disk is left, the usual cause on a crowded CI machine. Nothing is cached outside
# target/ (`--no-cache-dir`).
ensure_venv() {
  local venv=$1 req=$2 stamp="$1/.requirements"
  if [ -x "$venv/bin/python" ] && cmp -s "$req" "$stamp"; then
    return 0
  fi
  echo "installing $req into $venv"
  rm -rf "$venv"
  if ! python3 -m venv "$venv"; then
    venv_failed "python3 -m venv $venv" "$venv"
    return 1
  fi
  if ! "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input --no-cache-dir -r "$req"; then
    venv_failed "pip install -r $req" "$venv"
    return 1
  fi
  cp "$req" "$stamp"
}

venv_failed() {
  echo "error: $1 failed (python3 is $(command -v python3), $(python3 --version 2>&1))" >&2
  df -h "$(dirname "$2")" /tmp >&2 || true
  rm -rf "$2"
}
