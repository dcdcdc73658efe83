"""A real plane for the tests: `toolplane up` started once per session on free loopback ports.

The binary is `$TOOLPLANE_BIN`, default `target/debug/toolplane` (build it with
`cargo build -p toolplane`); a missing binary fails the tests that need it with that command.
The package under test is the installed one (`pip install ./clients/python[test]`), never the
source tree: `test_package.py` checks that.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
# The examples are scripts, not part of the package; the tests import them from here.
sys.path.insert(0, str(HERE.parent / "examples"))

from toolplane_client import connect

PORTS = ("runtime", "catalog", "catalog-http", "workspace", "mcp-proxy", "runtime-http", "workspace-http", "mcp-proxy-http")


def toolplane_bin() -> Path:
    path = Path(os.environ.get("TOOLPLANE_BIN", ROOT / "target" / "debug" / "toolplane"))
    if not path.is_absolute():
        path = ROOT / path
    if not path.is_file():
        pytest.fail(f"the toolplane binary is not at {path}: build it with `cargo build -p toolplane` or set TOOLPLANE_BIN")
    return path


@pytest.fixture(scope="session")
def addresses(tmp_path_factory):
    """The `host:port` of each service of a running plane: runtime, catalog, workspace, mcp_proxy."""
    data = tmp_path_factory.mktemp("plane")
    # Every port 0: the system picks free ones, read back from the `up` line, so the test neither
    # races for a port nor collides with a plane already running on the defaults.
    args = [str(toolplane_bin()), "--json", "up", "--data-dir", str(data / ".toolplane")]
    for name in PORTS:
        args += [f"--{name}-port", "0"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLPLANE_", "OPENAI_"))}
    proc = subprocess.Popen(args, cwd=data, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    up_line: dict = {}
    up = threading.Event()

    def read_stdout():
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == "up":
                up_line.update(event)
                up.set()
        # Its output ended: it stopped (or failed to start); the wait below need not go on.
        up.set()

    # Its log is drained as it comes, so a full pipe can never stall the plane.
    log: list[str] = []
    readers = [
        threading.Thread(target=read_stdout, daemon=True),
        threading.Thread(target=lambda: log.extend(proc.stderr), daemon=True),
    ]
    for reader in readers:
        reader.start()
    if not up.wait(60) or not up_line:
        proc.kill()
        readers[1].join(5)
        pytest.fail(f"`toolplane up` did not start: {''.join(log)}")

    yield {
        name: up_line[key].removeprefix("http://")
        for name, key in (("runtime", "runtime"), ("catalog", "catalog"), ("workspace", "workspace"), ("mcp_proxy", "mcpProxy"))
    }
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("`toolplane up` did not stop within 30 s of Ctrl-C")
    readers[1].join(5)
    assert code == 0, "".join(log)


@pytest.fixture(scope="session")
def plane(addresses):
    """The blocking client, connected to the session's plane."""
    client = connect(**addresses)
    client.wait_ready(timeout=30)
    yield client
    client.close()
