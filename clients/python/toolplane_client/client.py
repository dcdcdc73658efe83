"""The blocking client: :class:`Plane` and :func:`connect`.

Its methods are the calls of :mod:`toolplane_client._core`, made one RPC at a time; the asyncio
client (:mod:`toolplane_client.aio`) has the same methods as coroutines.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterator
from typing import Any

import grpc
from toolplane.v1 import runtime_pb2

from . import _core
from ._core import CHANNEL_OPTIONS, DEFAULT_ADDRESSES, Stubs, address, journal_event, sync_call
from .errors import DeadlineExceededError, from_rpc_error

__all__ = ["Plane", "connect"]


class _CallDetails(
    collections.namedtuple(
        "_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    ),
    grpc.ClientCallDetails,
):
    pass


class _Bearer(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds ``authorization: Bearer <token>`` to every call."""

    def __init__(self, token: str):
        self._header = ("authorization", f"Bearer {token}")

    def _details(self, details: Any) -> _CallDetails:
        metadata = [m for m in (details.metadata or []) if m[0] != "authorization"]
        metadata.append(self._header)
        return _CallDetails(
            details.method,
            details.timeout,
            metadata,
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation, details, requests):
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation, details, requests):
        return continuation(self._details(details), requests)


def token_from_env(token: str | None) -> str | None:
    """``token``, or else the ``TOOLPLANE_TOKEN`` environment variable, or else none."""
    if token is None:
        token = os.environ.get("TOOLPLANE_TOKEN", "").strip() or None
    return token


class Plane(Stubs):
    """Channels and stubs for the four services of one plane, and the host-driven calls.

    The stubs are ``plane.runtime``, ``plane.catalog``, ``plane.profiles``, ``plane.workspace`` and
    ``plane.mcp``; calls through them raise ``grpc.RpcError`` (``errors.from_rpc_error`` reads it),
    the methods below raise :class:`~toolplane_client.errors.ToolplaneError`.

    ``token`` (default: the ``TOOLPLANE_TOKEN`` environment variable) is sent with every call as
    ``authorization: Bearer <token>``; a plane started with ``--auth`` requires one. ``timeout``
    (seconds, default none) bounds each RPC of the methods below.
    """

    def __init__(
        self,
        runtime: str = DEFAULT_ADDRESSES["runtime"],
        catalog: str = DEFAULT_ADDRESSES["catalog"],
        workspace: str = DEFAULT_ADDRESSES["workspace"],
        mcp_proxy: str = DEFAULT_ADDRESSES["mcp_proxy"],
        cell: str = "",
        token: str | None = None,
        timeout: float | None = None,
    ):
        token = token_from_env(token)
        self.cell = cell
        self.timeout = timeout
        self._raw_channels = {
            name: grpc.insecure_channel(address(addr), options=CHANNEL_OPTIONS)
            for name, addr in (
                ("runtime", runtime),
                ("catalog", catalog),
                ("workspace", workspace),
                ("mcp_proxy", mcp_proxy),
            )
        }
        self._bind(
            {
                name: grpc.intercept_channel(channel, _Bearer(token)) if token else channel
                for name, channel in self._raw_channels.items()
            }
        )

    def __enter__(self) -> Plane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for channel in self._raw_channels.values():
            channel.close()

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Blocks until every service's channel is connected; raises
        :class:`~toolplane_client.errors.DeadlineExceededError` (``client.unreachable``) if one is
        not within ``timeout`` seconds."""
        for name, channel in self._raw_channels.items():
            try:
                grpc.channel_ready_future(channel).result(timeout=timeout)
            except grpc.FutureTimeoutError:
                raise DeadlineExceededError(
                    "client.unreachable", f"client.unreachable: the {name} did not answer within {timeout} s"
                ) from None

    put_profile = sync_call(_core.put_profile)
    get_profile = sync_call(_core.get_profile)
    create_run = sync_call(_core.create_run)
    get_run = sync_call(_core.get_run)
    open_invocation = sync_call(_core.open_invocation)
    execute_tool_calls = sync_call(_core.execute_tool_calls)
    collect_tool_results = sync_call(_core.collect_tool_results)
    close_invocation = sync_call(_core.close_invocation)
    list_approvals = sync_call(_core.list_approvals)
    approve = sync_call(_core.approve)
    deny = sync_call(_core.deny)
    answer = sync_call(_core.answer)
    chat_messages = sync_call(_core.chat_messages)
    list_tools = sync_call(_core.list_tools)

    def watch(self, run_id: str, from_seq: int = 1, history_only: bool = False) -> Iterator[dict[str, Any]]:
        """The run's journal events as they come (following the run until it ends, unless
        ``history_only``): ``{"seq", "type", "timestampUnixMs", "invocationId", "payload"}``."""
        request = runtime_pb2.WatchRunRequest(run_id=run_id, from_seq=from_seq, history_only=history_only)
        try:
            for item in self.runtime.WatchRun(request):
                yield journal_event(item)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def journal(self, run_id: str) -> list[dict[str, Any]]:
        """The run's journal as stored now (see :meth:`watch`)."""
        return list(self.watch(run_id, history_only=True))


def connect(
    runtime: str = DEFAULT_ADDRESSES["runtime"],
    catalog: str = DEFAULT_ADDRESSES["catalog"],
    workspace: str = DEFAULT_ADDRESSES["workspace"],
    mcp_proxy: str = DEFAULT_ADDRESSES["mcp_proxy"],
    cell: str = "",
    token: str | None = None,
    timeout: float | None = None,
) -> Plane:
    """A :class:`Plane` for the services at these addresses (``host:port`` or ``http://host:port``),
    calling with ``token`` (default: ``TOOLPLANE_TOKEN``)."""
    return Plane(
        runtime=runtime,
        catalog=catalog,
        workspace=workspace,
        mcp_proxy=mcp_proxy,
        cell=cell,
        token=token,
        timeout=timeout,
    )
