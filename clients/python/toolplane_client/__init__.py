"""A thin Python helper over toolplane's gRPC stubs (generated from ``proto/`` into ``toolplane.v1``).

It connects to a running plane (``toolplane up``) and wraps the host-driven calls an agent host
makes — create a run, open an invocation, hand each model turn's tool calls to the runtime — so
that a loop reads like the protocol. Everything else is the generated stubs, reachable as
``plane.runtime``, ``plane.catalog``, ``plane.profiles``, ``plane.workspace`` and ``plane.mcp``.

    from toolplane_client import connect

    with connect() as plane:                      # defaults: the ports of `toolplane up`
        run = plane.create_run(profile_id="default", chat_id="c1")
        inv = plane.open_invocation(run.run_id, "openai_chat")
        body = {"model": "gpt-4.1", "messages": messages, **inv.tools}
        ...                                       # call the model with `body`
        turn = plane.execute_tool_calls(inv, assistant_message)
        messages += turn.messages

Errors from the plane are raised as :class:`ToolplaneError`, whose ``code`` is the stable
``namespace.snake_case`` code at the start of the service's message.
"""

from __future__ import annotations

import collections
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import grpc

try:
    from toolplane.v1 import (
        catalog_pb2,
        catalog_pb2_grpc,
        common_pb2,
        mcp_proxy_pb2_grpc,
        profile_pb2,
        profile_pb2_grpc,
        runtime_pb2,
        runtime_pb2_grpc,
        tool_pb2,
        workspace_pb2,
        workspace_pb2_grpc,
    )
except ImportError as e:  # pragma: no cover - a setup error, explained
    raise ImportError(
        "toolplane_client needs the generated stubs (package `toolplane.v1`): "
        "run clients/python/generate.sh first"
    ) from e

__all__ = [
    "DEFAULT_ADDRESSES",
    "FORMATS",
    "Invocation",
    "Plane",
    "ToolplaneError",
    "TurnResult",
    "catalog_pb2",
    "common_pb2",
    "connect",
    "profile_pb2",
    "runtime_pb2",
    "tool_pb2",
    "workspace_pb2",
]

#: Where ``toolplane up`` listens by default.
DEFAULT_ADDRESSES = {
    "runtime": "127.0.0.1:7410",
    "catalog": "127.0.0.1:7420",
    "workspace": "127.0.0.1:7430",
    "mcp_proxy": "127.0.0.1:7440",
}

#: Provider formats by name.
FORMATS = {
    "openai_chat": tool_pb2.PROVIDER_FORMAT_OPENAI_CHAT,
    "openai_responses": tool_pb2.PROVIDER_FORMAT_OPENAI_RESPONSES,
    "anthropic_messages": tool_pb2.PROVIDER_FORMAT_ANTHROPIC_MESSAGES,
    "gemini": tool_pb2.PROVIDER_FORMAT_GEMINI,
}

#: Largest message accepted from the plane (journal pages, listings).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

_CODE = re.compile(r"^([a-z][a-z0-9_-]*(?:\.[a-z0-9_]+)+):")


class ToolplaneError(Exception):
    """A failed RPC: ``code`` is the plane's stable code (``model.unknown_tool_alias``, …), or
    ``grpc.<status>`` when the message carries none; ``status`` is the gRPC status code."""

    def __init__(self, code: str, message: str, status: grpc.StatusCode | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status

    @classmethod
    def from_rpc(cls, error: grpc.RpcError) -> "ToolplaneError":
        status = error.code() if hasattr(error, "code") else None
        message = (error.details() if hasattr(error, "details") else None) or str(error)
        match = _CODE.match(message)
        if match:
            code = match.group(1)
        else:
            code = "grpc." + (status.name.lower() if status is not None else "unknown")
        return cls(code, message, status)


def _call(method, request, **kwargs):
    try:
        return method(request, **kwargs)
    except grpc.RpcError as e:
        raise ToolplaneError.from_rpc(e) from None


@dataclass
class Invocation:
    """An open invocation: the request fields to merge into each model call (``tools``) and the
    turn the next calls answer. :meth:`Plane.execute_tool_calls` keeps it up to date."""

    id: str
    run_id: str
    provider_format: int
    #: Request fields for the provider (``tools`` + ``tool_choice``, or ``toolConfig`` for Gemini).
    tools: dict[str, Any]
    turn_id: str
    state: int
    omitted: list[Any] = field(default_factory=list)

    @property
    def open(self) -> bool:
        return self.state == runtime_pb2.INVOCATION_STATE_OPEN


@dataclass
class TurnResult:
    """What one ``ExecuteToolCalls`` returned."""

    #: Tool-result messages in the provider's format, to append after the assistant message.
    messages: list[Any]
    #: Extra messages for the next model request (cycle warnings, child results).
    injected_messages: list[Any]
    #: The structured results (``ToolResult``), in call order.
    results: list[Any]
    #: Audit details (``ToolCallDetail``: alias, outcome, elapsed, args and result paths).
    calls: list[Any]
    state: int
    failure: Any = None
    #: Calls held for approval (``HeldCall``: call id, tool id, approval id). While not empty the
    #: turn is not over: ``messages`` is empty and :meth:`Plane.collect_tool_results` collects it.
    awaiting: list[Any] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.state == runtime_pb2.INVOCATION_STATE_FINISHED


def _turn_result(invocation: Invocation, response: Any) -> TurnResult:
    """An ``ExecuteToolCallsResponse`` as a :class:`TurnResult`, with ``invocation`` moved on."""
    invocation.state = response.state
    if response.HasField("next_turn"):
        invocation.turn_id = response.next_turn.turn_id
        if response.next_turn.HasField("tool_choice_json"):
            key = "toolConfig" if invocation.provider_format == FORMATS["gemini"] else "tool_choice"
            invocation.tools[key] = json.loads(response.next_turn.tool_choice_json)
    return TurnResult(
        messages=json.loads(response.result_messages_json or "[]"),
        injected_messages=json.loads(response.injected_messages_json or "[]"),
        results=list(response.results),
        calls=list(response.calls),
        state=response.state,
        failure=response.failure if response.HasField("failure") else None,
        awaiting=list(response.awaiting),
    )


_CHOICE_MODES = {
    "auto": tool_pb2.TOOL_CHOICE_MODE_AUTO,
    "none": tool_pb2.TOOL_CHOICE_MODE_NONE,
    "required": tool_pb2.TOOL_CHOICE_MODE_REQUIRED,
}


def _tool_choice(choice: str) -> Any:
    """A ``ToolChoice``: a mode by name, or else the canonical id of the one tool to call."""
    if choice in _CHOICE_MODES:
        return tool_pb2.ToolChoice(mode=_CHOICE_MODES[choice])
    return tool_pb2.ToolChoice(mode=tool_pb2.TOOL_CHOICE_MODE_SPECIFIC, tool_id=choice)


def _address(value: str) -> str:
    return value.split("://", 1)[1] if "://" in value else value


class _CallDetails(
    collections.namedtuple("_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")),
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


class Plane:
    """Channels and stubs for the four services of one plane.

    ``token`` (default: the ``TOOLPLANE_TOKEN`` environment variable) is sent with every call as
    ``authorization: Bearer <token>``; a plane started with ``--auth`` requires one.
    """

    def __init__(
        self,
        runtime: str = DEFAULT_ADDRESSES["runtime"],
        catalog: str = DEFAULT_ADDRESSES["catalog"],
        workspace: str = DEFAULT_ADDRESSES["workspace"],
        mcp_proxy: str = DEFAULT_ADDRESSES["mcp_proxy"],
        cell: str = "",
        token: Optional[str] = None,
    ):
        if token is None:
            token = os.environ.get("TOOLPLANE_TOKEN", "").strip() or None
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", 16 * 1024 * 1024),
        ]
        self.cell = cell
        self._raw_channels = {
            name: grpc.insecure_channel(_address(addr), options=options)
            for name, addr in (
                ("runtime", runtime),
                ("catalog", catalog),
                ("workspace", workspace),
                ("mcp_proxy", mcp_proxy),
            )
        }
        self._channels = {
            name: grpc.intercept_channel(channel, _Bearer(token)) if token else channel
            for name, channel in self._raw_channels.items()
        }
        self.runtime = runtime_pb2_grpc.RuntimeServiceStub(self._channels["runtime"])
        self.catalog = catalog_pb2_grpc.CatalogServiceStub(self._channels["catalog"])
        self.profiles = profile_pb2_grpc.ProfileServiceStub(self._channels["catalog"])
        self.workspace = workspace_pb2_grpc.WorkspaceServiceStub(self._channels["workspace"])
        self.mcp = mcp_proxy_pb2_grpc.McpProxyServiceStub(self._channels["mcp_proxy"])

    def __enter__(self) -> "Plane":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for channel in self._raw_channels.values():
            channel.close()

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Blocks until every service's channel is connected."""
        for name, channel in self._raw_channels.items():
            try:
                grpc.channel_ready_future(channel).result(timeout=timeout)
            except grpc.FutureTimeoutError:
                raise ToolplaneError("client.unreachable", f"the {name} did not answer within {timeout} s") from None

    # Profiles -----------------------------------------------------------------------------

    def put_profile(self, profile: dict[str, Any]) -> Any:
        """Creates or replaces a profile (its ``id`` names it); returns the stored ``Profile``."""
        response = _call(
            self.profiles.PutProfile,
            profile_pb2.PutProfileRequest(
                cell_id=self.cell, profile_id=profile["id"], profile_json=json.dumps(profile)
            ),
        )
        return response.profile

    # Host-driven runs -------------------------------------------------------------------------

    def create_run(
        self,
        profile_id: str = "default",
        chat_id: str = "chat",
        background: bool = False,
        run_id: str = "",
        labels: dict[str, str] | None = None,
    ) -> Any:
        """Creates a host-driven run bound to a chat; returns the ``Run``."""
        mode = common_pb2.RUN_MODE_BACKGROUND if background else common_pb2.RUN_MODE_FOREGROUND
        response = _call(
            self.runtime.CreateRun,
            runtime_pb2.CreateRunRequest(
                cell_id=self.cell,
                run_id=run_id,
                chat=common_pb2.ChatBinding(chat_id=chat_id),
                mode=mode,
                profile_id=profile_id,
                labels=labels or {},
            ),
        )
        return response.run

    def open_invocation(self, run_id: str, provider_format: str = "openai_chat", profile_id: str = "") -> Invocation:
        """Opens the run's root invocation: its tools in ``provider_format`` and its first turn."""
        fmt = FORMATS[provider_format]
        response = _call(
            self.runtime.OpenInvocation,
            runtime_pb2.OpenInvocationRequest(run_id=run_id, profile_id=profile_id, provider_format=fmt),
        )
        return Invocation(
            id=response.invocation_id,
            run_id=run_id,
            provider_format=fmt,
            tools=json.loads(response.tools_json) if response.tools_json else {},
            turn_id=response.first_turn.turn_id,
            state=response.state,
            omitted=list(response.omitted),
        )

    def execute_tool_calls(
        self,
        invocation: Invocation,
        assistant_message: Any,
        model_response: Any | None = None,
        next_tool_choice: str | None = None,
    ) -> TurnResult:
        """Hands one model turn (the provider's own assistant message) to the runtime, which
        decodes, gates, executes, audits and journals each call. Updates ``invocation``'s turn,
        state and tool choice; a contract violation (unknown alias, stale turn) raises
        :class:`ToolplaneError`.

        ``next_tool_choice`` changes the tool choice from the next turn on: ``"auto"``, ``"none"``,
        ``"required"``, or a canonical tool id (``"builtin:workspace.finish"``) the model must
        call. ``invocation.tools`` then carries it for the next model request."""
        request = runtime_pb2.ExecuteToolCallsRequest(
            invocation_id=invocation.id,
            turn_id=invocation.turn_id,
            provider_format=invocation.provider_format,
            calls_json=json.dumps(assistant_message),
        )
        if model_response is not None:
            request.model_response_json = json.dumps(model_response)
        if next_tool_choice is not None:
            request.next_tool_choice.CopyFrom(_tool_choice(next_tool_choice))
        try:
            response = _call(self.runtime.ExecuteToolCalls, request)
        except ToolplaneError as e:
            # A malformed request (an invalid `next_tool_choice`) runs nothing and fails nothing.
            if e.code != "runtime.invalid_request":
                invocation.state = runtime_pb2.INVOCATION_STATE_FAILED
            raise
        return _turn_result(invocation, response)

    def collect_tool_results(self, invocation: Invocation, wait_s: float = 30.0) -> TurnResult:
        """Collects a turn whose calls were held for approval (``TurnResult.awaiting``), waiting up
        to ``wait_s`` seconds (at most 60) for the decisions. When ``awaiting`` comes back empty,
        ``messages`` holds every call of the turn, in order, and the invocation moved on to the
        next turn; otherwise call it again later."""
        response = _call(
            self.runtime.CollectToolResults,
            runtime_pb2.CollectToolResultsRequest(
                invocation_id=invocation.id,
                turn_id=invocation.turn_id,
                wait_ms=int(min(max(wait_s, 0.0), 60.0) * 1000),
            ),
        ).response
        return _turn_result(invocation, response)

    def list_approvals(self, run_id: str = "", state: str = "pending") -> list[Any]:
        """Approvals and ``ask_user`` questions of the caller's cell (``Approval`` messages),
        newest first; ``state`` is pending, approved, denied, expired or all."""
        states = {
            "all": runtime_pb2.APPROVAL_STATE_UNSPECIFIED,
            "pending": runtime_pb2.APPROVAL_STATE_PENDING,
            "approved": runtime_pb2.APPROVAL_STATE_APPROVED,
            "denied": runtime_pb2.APPROVAL_STATE_DENIED,
            "expired": runtime_pb2.APPROVAL_STATE_EXPIRED,
        }
        out: list[Any] = []
        token = ""
        while True:
            page = _call(
                self.runtime.ListApprovals,
                runtime_pb2.ListApprovalsRequest(run_id=run_id, state=states[state], page_size=1000, page_token=token),
            )
            out.extend(page.approvals)
            token = page.next_page_token
            if not token:
                return out

    def approve(self, approval_id: str, reason: str = "", remember: bool = False) -> Any:
        """Approves a held call; ``remember`` approves later calls of the same tool in the run."""
        request = runtime_pb2.DecideApprovalRequest(
            approval_id=approval_id, approve=True, reason=reason, remember_for_run=remember
        )
        return _call(self.runtime.DecideApproval, request).approval

    def deny(self, approval_id: str, reason: str) -> Any:
        """Denies a held call (or a question); the model reads the reason."""
        request = runtime_pb2.DecideApprovalRequest(approval_id=approval_id, approve=False, reason=reason)
        return _call(self.runtime.DecideApproval, request).approval

    def answer(self, approval_id: str, text: str) -> Any:
        """Answers an ``ask_user`` question; the answer is the tool's result."""
        request = runtime_pb2.AnswerQuestionRequest(approval_id=approval_id, answer=text)
        return _call(self.runtime.AnswerQuestion, request).approval

    def close_invocation(self, invocation: Invocation, reason: str = "") -> None:
        response = _call(
            self.runtime.CloseInvocation,
            runtime_pb2.CloseInvocationRequest(invocation_id=invocation.id, reason=reason),
        )
        invocation.state = response.invocation.state

    def get_run(self, run_id: str) -> Any:
        return _call(self.runtime.GetRun, runtime_pb2.GetRunRequest(run_id=run_id)).run

    def journal(self, run_id: str) -> list[dict[str, Any]]:
        """The run's journal as stored now: ``{"seq", "type", "payload", …}`` dicts."""
        return list(self.watch(run_id, history_only=True))

    def watch(self, run_id: str, from_seq: int = 1, history_only: bool = False) -> Iterator[dict[str, Any]]:
        """Streams the run's journal events (following the run until it ends, unless
        ``history_only``)."""
        try:
            for item in self.runtime.WatchRun(
                runtime_pb2.WatchRunRequest(run_id=run_id, from_seq=from_seq, history_only=history_only)
            ):
                e = item.event
                yield {
                    "seq": e.seq,
                    "type": e.type,
                    "timestampUnixMs": e.timestamp_unix_ms,
                    "invocationId": e.scope.invocation_id,
                    "payload": json.loads(e.payload_json) if e.payload_json else {},
                }
        except grpc.RpcError as e:
            raise ToolplaneError.from_rpc(e) from None

    def chat_messages(self, chat_id: str) -> list[Any]:
        """The chat's messages (``ChatMessage``), oldest first."""
        messages: list[Any] = []
        token = ""
        while True:
            page = _call(
                self.workspace.ListChatMessages,
                workspace_pb2.ListChatMessagesRequest(
                    cell_id=self.cell, chat_id=chat_id, page_size=1000, page_token=token
                ),
            )
            messages.extend(page.messages)
            token = page.next_page_token
            if not token:
                return messages

    def list_tools(self, include_unusable: bool = False, profile_id: str = "") -> list[Any]:
        """The catalog's tool listings (``ToolListing``)."""
        tools: list[Any] = []
        token = ""
        while True:
            page = _call(
                self.catalog.ListTools,
                catalog_pb2.ListToolsRequest(
                    cell_id=self.cell,
                    include_unusable=include_unusable,
                    profile_id=profile_id,
                    page_size=1000,
                    page_token=token,
                ),
            )
            tools.extend(page.tools)
            token = page.next_page_token
            if not token:
                return tools


def connect(
    runtime: str = DEFAULT_ADDRESSES["runtime"],
    catalog: str = DEFAULT_ADDRESSES["catalog"],
    workspace: str = DEFAULT_ADDRESSES["workspace"],
    mcp_proxy: str = DEFAULT_ADDRESSES["mcp_proxy"],
    cell: str = "",
    token: Optional[str] = None,
) -> Plane:
    """A :class:`Plane` for the services at these addresses (``host:port`` or ``http://host:port``),
    calling with ``token`` (default: ``TOOLPLANE_TOKEN``)."""
    return Plane(runtime=runtime, catalog=catalog, workspace=workspace, mcp_proxy=mcp_proxy, cell=cell, token=token)
