"""The asyncio client: :class:`AsyncPlane` and :func:`connect`, over ``grpc.aio`` channels.

The same methods, arguments and results as the blocking :class:`~toolplane_client.Plane`, as
coroutines (``watch`` is an async iterator); errors are the same
:class:`~toolplane_client.errors.ToolplaneError` classes.

    from toolplane_client import aio

    async with aio.connect() as plane:
        run = await plane.create_run(profile_id="default", chat_id="c1")
        inv = await plane.open_invocation(run.run_id, "openai_chat")
        turn = await plane.execute_tool_calls(inv, assistant_message)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
from toolplane.v1 import runtime_pb2

from . import _core
from ._core import CHANNEL_OPTIONS, DEFAULT_ADDRESSES, Stubs, address, async_call, journal_event
from .client import token_from_env
from .errors import DeadlineExceededError, from_rpc_error

__all__ = ["AsyncPlane", "connect"]


def _with_bearer(details: grpc.aio.ClientCallDetails, header: tuple[str, str]) -> grpc.aio.ClientCallDetails:
    metadata = grpc.aio.Metadata(*[m for m in (details.metadata or ()) if m[0] != "authorization"])
    metadata.add(*header)
    return grpc.aio.ClientCallDetails(
        details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
    )


class _BearerUnary(grpc.aio.UnaryUnaryClientInterceptor):
    """Adds ``authorization: Bearer <token>`` to every unary call."""

    def __init__(self, token: str):
        self._header = ("authorization", f"Bearer {token}")

    async def intercept_unary_unary(self, continuation, client_call_details, request):
        return await continuation(_with_bearer(client_call_details, self._header), request)


class _BearerStream(grpc.aio.UnaryStreamClientInterceptor):
    """Adds ``authorization: Bearer <token>`` to every server-streaming call (``WatchRun``)."""

    def __init__(self, token: str):
        self._header = ("authorization", f"Bearer {token}")

    async def intercept_unary_stream(self, continuation, client_call_details, request):
        return await continuation(_with_bearer(client_call_details, self._header), request)


class AsyncPlane(Stubs):
    """Channels and stubs for the four services of one plane, for asyncio. Make it inside a
    running event loop (``grpc.aio`` binds its channels to it) and close it there:
    ``async with aio.connect(...) as plane``. See :class:`~toolplane_client.Plane`."""

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
        interceptors: list[Any] = [_BearerUnary(token), _BearerStream(token)] if token else []
        self.cell = cell
        self.timeout = timeout
        self._channels = {
            name: grpc.aio.insecure_channel(address(addr), options=CHANNEL_OPTIONS, interceptors=interceptors)
            for name, addr in (
                ("runtime", runtime),
                ("catalog", catalog),
                ("workspace", workspace),
                ("mcp_proxy", mcp_proxy),
            )
        }
        self._bind(self._channels)

    async def __aenter__(self) -> AsyncPlane:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()

    async def wait_ready(self, timeout: float = 30.0) -> None:
        """Waits until every service's channel is connected; raises
        :class:`~toolplane_client.errors.DeadlineExceededError` (``client.unreachable``) if one is
        not within ``timeout`` seconds."""
        for name, channel in self._channels.items():
            try:
                await asyncio.wait_for(channel.channel_ready(), timeout)
            except TimeoutError:
                raise DeadlineExceededError(
                    "client.unreachable", f"client.unreachable: the {name} did not answer within {timeout} s"
                ) from None

    put_profile = async_call(_core.put_profile)
    get_profile = async_call(_core.get_profile)
    create_run = async_call(_core.create_run)
    get_run = async_call(_core.get_run)
    open_invocation = async_call(_core.open_invocation)
    execute_tool_calls = async_call(_core.execute_tool_calls)
    collect_tool_results = async_call(_core.collect_tool_results)
    close_invocation = async_call(_core.close_invocation)
    list_approvals = async_call(_core.list_approvals)
    approve = async_call(_core.approve)
    deny = async_call(_core.deny)
    answer = async_call(_core.answer)
    chat_messages = async_call(_core.chat_messages)
    list_tools = async_call(_core.list_tools)

    async def watch(self, run_id: str, from_seq: int = 1, history_only: bool = False) -> AsyncIterator[dict[str, Any]]:
        """The run's journal events as they come (see :meth:`toolplane_client.Plane.watch`)."""
        request = runtime_pb2.WatchRunRequest(run_id=run_id, from_seq=from_seq, history_only=history_only)
        try:
            async for item in self.runtime.WatchRun(request):
                yield journal_event(item)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    async def journal(self, run_id: str) -> list[dict[str, Any]]:
        """The run's journal as stored now."""
        return [event async for event in self.watch(run_id, history_only=True)]


def connect(
    runtime: str = DEFAULT_ADDRESSES["runtime"],
    catalog: str = DEFAULT_ADDRESSES["catalog"],
    workspace: str = DEFAULT_ADDRESSES["workspace"],
    mcp_proxy: str = DEFAULT_ADDRESSES["mcp_proxy"],
    cell: str = "",
    token: str | None = None,
    timeout: float | None = None,
) -> AsyncPlane:
    """An :class:`AsyncPlane` for the services at these addresses (``host:port`` or
    ``http://host:port``), calling with ``token`` (default: ``TOOLPLANE_TOKEN``)."""
    return AsyncPlane(
        runtime=runtime,
        catalog=catalog,
        workspace=workspace,
        mcp_proxy=mcp_proxy,
        cell=cell,
        token=token,
        timeout=timeout,
    )
