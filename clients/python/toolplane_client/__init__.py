"""The Python client of toolplane, over the gRPC stubs generated from ``proto/`` (``toolplane.v1``,
made while the package is built).

It connects to a running plane (``toolplane up``) and wraps the calls an agent host makes — create
a run, open an invocation, hand each model turn's tool calls to the runtime — so that a loop reads
like the protocol. The stubs themselves are ``plane.runtime``, ``plane.catalog``,
``plane.profiles``, ``plane.workspace`` and ``plane.mcp``.

    from toolplane_client import connect

    with connect() as plane:                      # defaults: the ports of `toolplane up`
        run = plane.create_run(profile_id="default", chat_id="c1")
        inv = plane.open_invocation(run.run_id, "openai_chat")
        body = {"model": "gpt-4.1", "messages": messages, **inv.tools}
        ...                                       # call the model with `body`
        turn = plane.execute_tool_calls(inv, assistant_message)
        messages += turn.messages

:mod:`toolplane_client.aio` is the same client for asyncio. A failed call raises a
:class:`~toolplane_client.errors.ToolplaneError` (a subclass per gRPC status code) whose
``reason`` is the plane's stable code, read from the status's ``google.rpc.ErrorInfo``, with its
metadata, retry delay and field violations (:mod:`toolplane_client.errors`).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from toolplane.v1 import (
    catalog_pb2,
    common_pb2,
    mcp_proxy_pb2,
    profile_pb2,
    runtime_pb2,
    tool_pb2,
    workspace_pb2,
)

from ._core import DEFAULT_ADDRESSES, FORMATS, MAX_MESSAGE_BYTES, Invocation, TurnResult
from .client import Plane, connect
from .errors import FieldViolation, ToolplaneError, from_rpc_error

try:
    __version__ = version("toolplane-client")
except PackageNotFoundError:  # pragma: no cover - imported from a source tree, not installed
    __version__ = "0"

__all__ = [
    "DEFAULT_ADDRESSES",
    "FORMATS",
    "MAX_MESSAGE_BYTES",
    "FieldViolation",
    "Invocation",
    "Plane",
    "ToolplaneError",
    "TurnResult",
    "catalog_pb2",
    "common_pb2",
    "connect",
    "from_rpc_error",
    "mcp_proxy_pb2",
    "profile_pb2",
    "runtime_pb2",
    "tool_pb2",
    "workspace_pb2",
]
