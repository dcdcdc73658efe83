"""What the sync and the asyncio client share: the host-driven calls, written once.

Each call is a generator that yields ``(stub method, request)`` for every RPC it makes and gets the
response back (or a :class:`~toolplane_client.errors.ToolplaneError` thrown in); it returns the
call's result. :func:`sync_call` drives it with blocking calls (``Plane``), :func:`async_call` with
``await`` (``AsyncPlane``), so both clients have the same methods, arguments and results, and no
request is built or response read in two places.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

import grpc
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

from .errors import ToolplaneError, from_rpc_error

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

#: Channel options of both clients.
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", 16 * 1024 * 1024),
]

_APPROVAL_STATES = {
    "all": runtime_pb2.APPROVAL_STATE_UNSPECIFIED,
    "pending": runtime_pb2.APPROVAL_STATE_PENDING,
    "approved": runtime_pb2.APPROVAL_STATE_APPROVED,
    "denied": runtime_pb2.APPROVAL_STATE_DENIED,
    "expired": runtime_pb2.APPROVAL_STATE_EXPIRED,
}

_CHOICE_MODES = {
    "auto": tool_pb2.TOOL_CHOICE_MODE_AUTO,
    "none": tool_pb2.TOOL_CHOICE_MODE_NONE,
    "required": tool_pb2.TOOL_CHOICE_MODE_REQUIRED,
}


@dataclass
class Invocation:
    """An open invocation: the request fields to merge into each model call (``tools``) and the
    turn the next calls answer. ``execute_tool_calls`` keeps it up to date."""

    id: str
    run_id: str
    provider_format: tool_pb2.ProviderFormat
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
    #: turn is not over: ``messages`` is empty and ``collect_tool_results`` collects it.
    awaiting: list[Any] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.state == runtime_pb2.INVOCATION_STATE_FINISHED


def journal_event(item: Any) -> dict[str, Any]:
    """A ``WatchRunResponse`` as ``{"seq", "type", "timestampUnixMs", "invocationId", "payload"}``."""
    e = item.event
    return {
        "seq": e.seq,
        "type": e.type,
        "timestampUnixMs": e.timestamp_unix_ms,
        "invocationId": e.scope.invocation_id,
        "payload": json.loads(e.payload_json) if e.payload_json else {},
    }


def address(value: str) -> str:
    """``host:port`` of ``host:port`` or ``http://host:port``."""
    return value.split("://", 1)[1] if "://" in value else value


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


def _tool_choice(choice: str) -> Any:
    """A ``ToolChoice``: a mode by name, or else the canonical id of the one tool to call."""
    if choice in _CHOICE_MODES:
        return tool_pb2.ToolChoice(mode=_CHOICE_MODES[choice])
    return tool_pb2.ToolChoice(mode=tool_pb2.TOOL_CHOICE_MODE_SPECIFIC, tool_id=choice)


P = ParamSpec("P")
R = TypeVar("R")
#: A call: yields ``(stub method, request)`` per RPC, is sent each response, returns the result.
Op = Generator[tuple[Callable[..., Any], Any], Any, R]


def _as_toolplane_error(error: grpc.RpcError) -> ToolplaneError:
    converted = from_rpc_error(error)
    converted.__suppress_context__ = True
    return converted


def sync_call(op: Callable[P, Op[R]]) -> Callable[P, R]:
    """The blocking method of a call: each RPC is made in turn, a ``grpc.RpcError`` becomes a
    :class:`ToolplaneError`."""

    @functools.wraps(op)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        client = args[0]
        steps = op(*args, **kwargs)
        try:
            step = next(steps)
            while True:
                method, request = step
                try:
                    response = method(request, timeout=getattr(client, "timeout", None))
                except grpc.RpcError as e:
                    step = steps.throw(_as_toolplane_error(e))
                else:
                    step = steps.send(response)
        except StopIteration as done:
            return done.value

    return call


def async_call(op: Callable[P, Op[R]]) -> Callable[P, Awaitable[R]]:
    """The coroutine method of a call, for ``grpc.aio`` stubs."""

    @functools.wraps(op)
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        client = args[0]
        steps = op(*args, **kwargs)
        try:
            step = next(steps)
            while True:
                method, request = step
                try:
                    response = await method(request, timeout=getattr(client, "timeout", None))
                except grpc.RpcError as e:
                    step = steps.throw(_as_toolplane_error(e))
                else:
                    step = steps.send(response)
        except StopIteration as done:
            return done.value

    return call


class Stubs:
    """The stubs of the four services (``runtime``, ``catalog``, ``profiles``, ``workspace``,
    ``mcp``) and what every call needs: the cell and the per-call timeout."""

    cell: str
    timeout: float | None

    def _bind(self, channels: dict[str, Any]) -> None:
        """The stubs, over channels named ``runtime``, ``catalog``, ``workspace``, ``mcp_proxy``."""
        self.runtime = runtime_pb2_grpc.RuntimeServiceStub(channels["runtime"])
        self.catalog = catalog_pb2_grpc.CatalogServiceStub(channels["catalog"])
        self.profiles = profile_pb2_grpc.ProfileServiceStub(channels["catalog"])
        self.workspace = workspace_pb2_grpc.WorkspaceServiceStub(channels["workspace"])
        self.mcp = mcp_proxy_pb2_grpc.McpProxyServiceStub(channels["mcp_proxy"])


# Profiles ----------------------------------------------------------------------------------------

def put_profile(client: Stubs, profile: dict[str, Any], request_id: str = "") -> Op[Any]:
    """Creates or replaces a profile (its ``id`` names it); returns the stored ``Profile``.
    ``request_id`` makes a retry safe (docs/errors.md, "Retrying creates")."""
    response = yield client.profiles.PutProfile, profile_pb2.PutProfileRequest(
        cell_id=client.cell, profile_id=profile["id"], profile_json=json.dumps(profile), request_id=request_id
    )
    return response.profile

def get_profile(client: Stubs, profile_id: str) -> Op[Any]:
    """The stored ``Profile``."""
    response = yield client.profiles.GetProfile, profile_pb2.GetProfileRequest(
        cell_id=client.cell, profile_id=profile_id
    )
    return response.profile

# Host-driven runs --------------------------------------------------------------------------------

def create_run(
    client: Stubs,
    profile_id: str = "default",
    chat_id: str = "chat",
    background: bool = False,
    run_id: str = "",
    labels: dict[str, str] | None = None,
    request_id: str = "",
) -> Op[Any]:
    """Creates a host-driven run bound to a chat; returns the ``Run``. A retry with the same
    ``request_id`` returns the same run instead of creating another."""
    mode = common_pb2.RUN_MODE_BACKGROUND if background else common_pb2.RUN_MODE_FOREGROUND
    response = yield client.runtime.CreateRun, runtime_pb2.CreateRunRequest(
        cell_id=client.cell,
        run_id=run_id,
        chat=common_pb2.ChatBinding(chat_id=chat_id),
        mode=mode,
        profile_id=profile_id,
        labels=labels or {},
        request_id=request_id,
    )
    return response.run

def get_run(client: Stubs, run_id: str) -> Op[Any]:
    """The ``Run`` as it is now."""
    response = yield client.runtime.GetRun, runtime_pb2.GetRunRequest(run_id=run_id)
    return response.run

def open_invocation(client: Stubs, run_id: str, provider_format: str = "openai_chat", profile_id: str = "") -> Op[Invocation]:
    """Opens the run's root invocation: its tools in ``provider_format`` and its first turn."""
    fmt = FORMATS[provider_format]
    response = yield client.runtime.OpenInvocation, runtime_pb2.OpenInvocationRequest(
        run_id=run_id, profile_id=profile_id, provider_format=fmt
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
    client: Stubs,
    invocation: Invocation,
    assistant_message: Any,
    model_response: Any = None,
    next_tool_choice: str | None = None,
) -> Op[TurnResult]:
    """Hands one model turn (the provider's own assistant message) to the runtime, which
    decodes, gates, executes, audits and journals each call. Updates ``invocation``'s turn,
    state and tool choice; a contract violation (unknown alias, stale turn) raises
    :class:`ToolplaneError` and fails the invocation.

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
        response = yield client.runtime.ExecuteToolCalls, request
    except ToolplaneError as e:
        # A malformed request (an invalid `next_tool_choice`) runs nothing and fails nothing.
        if e.reason != "runtime.invalid_request":
            invocation.state = runtime_pb2.INVOCATION_STATE_FAILED
        raise
    return _turn_result(invocation, response)

def collect_tool_results(client: Stubs, invocation: Invocation, wait_s: float = 30.0) -> Op[TurnResult]:
    """Collects a turn whose calls were held for approval (``TurnResult.awaiting``), waiting up
    to ``wait_s`` seconds (at most 60) for the decisions. When ``awaiting`` comes back empty,
    ``messages`` holds every call of the turn, in order, and the invocation moved on to the
    next turn; otherwise call it again later."""
    response = yield client.runtime.CollectToolResults, runtime_pb2.CollectToolResultsRequest(
        invocation_id=invocation.id,
        turn_id=invocation.turn_id,
        wait_ms=int(min(max(wait_s, 0.0), 60.0) * 1000),
    )
    return _turn_result(invocation, response.response)

def close_invocation(client: Stubs, invocation: Invocation, reason: str = "") -> Op[None]:
    """Closes the invocation (the host gives up on it); ``invocation.state`` follows."""
    response = yield client.runtime.CloseInvocation, runtime_pb2.CloseInvocationRequest(
        invocation_id=invocation.id, reason=reason
    )
    invocation.state = response.invocation.state

# Approvals ---------------------------------------------------------------------------------------

def list_approvals(client: Stubs, run_id: str = "", state: str = "pending") -> Op[list[Any]]:
    """Approvals and ``ask_user`` questions of the caller's cell (``Approval`` messages),
    newest first; ``state`` is pending, approved, denied, expired or all."""
    out: list[Any] = []
    token = ""
    while True:
        page = yield client.runtime.ListApprovals, runtime_pb2.ListApprovalsRequest(
            run_id=run_id, state=_APPROVAL_STATES[state], page_size=1000, page_token=token
        )
        out.extend(page.approvals)
        token = page.next_page_token
        if not token:
            return out

def approve(client: Stubs, approval_id: str, reason: str = "", remember: bool = False) -> Op[Any]:
    """Approves a held call; ``remember`` approves later calls of the same tool in the run."""
    response = yield client.runtime.DecideApproval, runtime_pb2.DecideApprovalRequest(
        approval_id=approval_id, approve=True, reason=reason, remember_for_run=remember
    )
    return response.approval

def deny(client: Stubs, approval_id: str, reason: str) -> Op[Any]:
    """Denies a held call (or a question); the model reads the reason."""
    response = yield client.runtime.DecideApproval, runtime_pb2.DecideApprovalRequest(
        approval_id=approval_id, approve=False, reason=reason
    )
    return response.approval

def answer(client: Stubs, approval_id: str, text: str) -> Op[Any]:
    """Answers an ``ask_user`` question; the answer is the tool's result."""
    response = yield client.runtime.AnswerQuestion, runtime_pb2.AnswerQuestionRequest(
        approval_id=approval_id, answer=text
    )
    return response.approval

# Listings ----------------------------------------------------------------------------------------

def chat_messages(client: Stubs, chat_id: str) -> Op[list[Any]]:
    """The chat's messages (``ChatMessage``), oldest first."""
    messages: list[Any] = []
    token = ""
    while True:
        page = yield client.workspace.ListChatMessages, workspace_pb2.ListChatMessagesRequest(
            cell_id=client.cell, chat_id=chat_id, page_size=1000, page_token=token
        )
        messages.extend(page.messages)
        token = page.next_page_token
        if not token:
            return messages

def list_tools(client: Stubs, include_unusable: bool = False, profile_id: str = "") -> Op[list[Any]]:
    """The catalog's tool listings (``ToolListing``)."""
    tools: list[Any] = []
    token = ""
    while True:
        page = yield client.catalog.ListTools, catalog_pb2.ListToolsRequest(
            cell_id=client.cell,
            include_unusable=include_unusable,
            profile_id=profile_id,
            page_size=1000,
            page_token=token,
        )
        tools.extend(page.tools)
        token = page.next_page_token
        if not token:
            return tools
