"""A client decides what to do about failures of every service from `ErrorInfo.reason` alone
(docs/errors.md, "Error details"): the plane's statuses arrive as typed `ToolplaneError`s carrying
the reason, domain, metadata and field violations, and a create retried with its `request_id`
creates once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest
from toolplane_client import (
    ToolplaneError,
    catalog_pb2,
    from_rpc_error,
    mcp_proxy_pb2,
    profile_pb2,
    runtime_pb2,
    workspace_pb2,
)
from toolplane_client.errors import (
    DOMAIN,
    AbortedError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    error_class,
)


def action(error: ToolplaneError) -> str:
    """What this client does about a failure: decided by the reason only, never the message."""
    match error.reason:
        case (
            "runtime.not_found"
            | "profile.not_found"
            | "catalog.tool_not_found"
            | "mcp.server_not_found"
            | "workspace.run_not_found"
            | "workspace.not_found"
        ):
            return "create"
        case "profile.version_conflict" | "policy.version_conflict":
            return "reread"
        case "model.unknown_tool_alias" | "runtime.invocation_not_open" | "runtime.stale_turn":
            return "new-invocation"
        case (
            "runtime.invalid_request"
            | "request.invalid_page_token"
            | "request.idempotency_mismatch"
            | "profile.invalid"
            | "policy.invalid"
            | "tool.invalid_id"
            | "mcp.invalid_registration"
            | "workspace.invalid_request"
        ):
            return "fix"
        case "runtime.dependency_unavailable":
            return "wait" if error.retryable else "fix"
    pytest.fail(f"this client does not know `{error.reason}`: {error!r}")


def checked(error: ToolplaneError) -> ToolplaneError:
    """What every toolplane status carries, as the typed error shows it, with the metadata naming
    the service that refused."""
    assert error.domain == DOMAIN, repr(error)
    assert type(error) is error_class(error.status), repr(error)
    assert error.message.startswith(error.reason + ": "), repr(error)
    assert not error.message[len(error.reason) + 2 :].startswith(error.reason + ":"), "the code is stated once"
    assert error.metadata.get("service") in {"runtime", "catalog", "workspace", "mcp-proxy"}, error.metadata
    if error.status == grpc.StatusCode.INVALID_ARGUMENT:
        assert error.field_violations, f"no BadRequest: {error!r}"
    return error


def raw(method: Callable[[Any], Any], request: Any) -> ToolplaneError:
    """A call through a raw stub, which raises `grpc.RpcError`, read as a typed error."""
    try:
        method(request)
    except grpc.RpcError as e:
        return checked(from_rpc_error(e))
    pytest.fail(f"{request!r} succeeded")


def client(call: Callable[..., Any], *args: Any, **kwargs: Any) -> ToolplaneError:
    """A call through the client, which raises the typed error itself."""
    with pytest.raises(ToolplaneError) as caught:
        call(*args, **kwargs)
    return checked(caught.value)


def refused_retry(call: Callable[..., Any], **kwargs: Any) -> ToolplaneError:
    """A create refused by the shared idempotency layer."""
    with pytest.raises(ToolplaneError) as caught:
        call(**kwargs)
    return checked(caught.value)


def test_a_client_branches_on_error_info_reason_alone(plane):
    plane.put_profile({"id": "py1", "tools": {"allow": ["builtin:workspace.*"]}})
    failed_run = plane.create_run(profile_id="py1", chat_id="py-errors", background=True)
    failed = plane.open_invocation(failed_run.run_id, "openai_chat")
    bad_call = {"role": "assistant", "tool_calls": [{"id": "x", "type": "function", "function": {"name": "nope", "arguments": "{}"}}]}
    cases = [
        ("GetRun of an unknown run", client(plane.get_run, "run-none"), "create"),
        ("the journal of an unknown run (a stream)", client(plane.journal, "run-none"), "create"),
        ("StartRun without a spec", raw(plane.runtime.StartRun, runtime_pb2.StartRunRequest()), "fix"),
        ("ListRuns with a forged token", raw(plane.runtime.ListRuns, runtime_pb2.ListRunsRequest(page_token="50")), "fix"),
        ("GetProfile of an unknown profile", client(plane.get_profile, "nope"), "create"),
        (
            "PutProfile of malformed JSON",
            raw(plane.profiles.PutProfile, profile_pb2.PutProfileRequest(profile_id="py2", profile_json="{")),
            "fix",
        ),
        (
            "PutProfile of a stale version",
            raw(
                plane.profiles.PutProfile,
                profile_pb2.PutProfileRequest(
                    profile_id="py1", profile_json='{"id": "py1", "tools": {"allow": ["*"]}}', expected_version=9
                ),
            ),
            "reread",
        ),
        ("PutPlatformPolicy of malformed JSON", raw(plane.profiles.PutPlatformPolicy, profile_pb2.PutPlatformPolicyRequest(policy_json="[]")), "fix"),
        ("GetTool of an unknown tool", raw(plane.catalog.GetTool, catalog_pb2.GetToolRequest(tool_id="builtin:no.such_tool")), "create"),
        ("GetTool of a malformed id", raw(plane.catalog.GetTool, catalog_pb2.GetToolRequest(tool_id="no colon")), "fix"),
        (
            "GetServer of an unknown server",
            raw(plane.mcp.GetServer, mcp_proxy_pb2.GetServerRequest(server_id="00000000-0000-4000-8000-000000000000")),
            "create",
        ),
        ("UpsertServer without a transport", raw(plane.mcp.UpsertServer, mcp_proxy_pb2.UpsertServerRequest(display_name="x")), "fix"),
        (
            "ReadJournal of an unknown run",
            raw(plane.workspace.ReadJournal, workspace_pb2.ReadJournalRequest(run_id="run-none", from_seq=1, page_size=10)),
            "create",
        ),
        ("GetRunWorkspace without a run id", raw(plane.workspace.GetRunWorkspace, workspace_pb2.GetRunWorkspaceRequest()), "fix"),
        ("a tool call of an alias never offered", client(plane.execute_tool_calls, failed, bad_call), "new-invocation"),
        ("tool calls for a failed invocation", client(plane.execute_tool_calls, failed, bad_call), "new-invocation"),
    ]
    seen = {what: (error.reason, action(error)) for what, error, _ in cases}
    assert {what: act for what, (_, act) in seen.items()} == {what: want for what, _, want in cases}, seen
    reasons = {reason for reason, _ in seen.values()}
    assert len(reasons) >= 10, reasons
    # The classes follow the gRPC status, for code that would rather catch by kind.
    errors = {what: error for what, error, _ in cases}
    assert isinstance(errors["GetRun of an unknown run"], NotFoundError)
    assert isinstance(errors["PutProfile of a stale version"], AbortedError)
    assert isinstance(errors["a tool call of an alias never offered"], FailedPreconditionError)
    assert [v.field for v in errors["ListRuns with a forged token"].field_violations] == ["page_token"]


def test_a_peer_refusal_keeps_the_peer_reason_as_its_cause(plane):
    plane.put_profile({"id": "py4", "tools": {"allow": ["builtin:workspace.*"]}})
    run = plane.create_run(profile_id="py4", chat_id="py-cause", background=True)
    error = client(plane.open_invocation, run.run_id, "openai_chat", profile_id="nope")
    assert error.metadata["cause"] == "profile.not_found", repr(error)
    assert error.metadata["service"] == "runtime"


def test_a_retried_create_with_its_request_id_creates_once(plane):
    plane.put_profile({"id": "py3", "tools": {"allow": ["builtin:dice.roll"]}})
    first = plane.create_run(profile_id="py3", chat_id="py-chat", background=True, request_id="py-create-1")
    again = plane.create_run(profile_id="py3", chat_id="py-chat", background=True, request_id="py-create-1")
    assert first.run_id == again.run_id
    error = refused_retry(plane.create_run, profile_id="py1", chat_id="py-chat", background=True, request_id="py-create-1")
    assert isinstance(error, InvalidArgumentError)
    assert error.reason == "request.idempotency_mismatch"
    assert [v.field for v in error.field_violations] == ["request_id"]
    runs = plane.runtime.ListRuns(runtime_pb2.ListRunsRequest(chat_id="py-chat", page_size=1000)).runs
    assert [r.run_id for r in runs] == [first.run_id]


def test_retry_info_and_unknown_statuses_read_without_a_plane():
    from google.protobuf import any_pb2, duration_pb2
    from google.rpc import error_details_pb2, status_pb2

    class Failed(grpc.RpcError):
        def __init__(self, code: grpc.StatusCode, message: str, status: Any = None):
            self._code, self._message = code, message
            self._trailer = [("grpc-status-details-bin", status.SerializeToString())] if status else []

        def code(self):
            return self._code

        def details(self):
            return self._message

        def trailing_metadata(self):
            return self._trailer

    def packed(*messages: Any) -> list[Any]:
        out = []
        for m in messages:
            detail = any_pb2.Any()
            detail.Pack(m)
            out.append(detail)
        return out

    message = "runtime.dependency_unavailable: the workspace did not answer"
    status = status_pb2.Status(
        code=grpc.StatusCode.UNAVAILABLE.value[0],
        message=message,
        details=packed(
            error_details_pb2.ErrorInfo(reason="runtime.dependency_unavailable", domain=DOMAIN, metadata={"service": "runtime"}),
            error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=2)),
        ),
    )
    error = from_rpc_error(Failed(grpc.StatusCode.UNAVAILABLE, message, status))
    assert type(error).__name__ == "UnavailableError"
    assert error.reason == "runtime.dependency_unavailable" and error.retryable
    assert error.retry_delay.total_seconds() == 2
    assert action(error) == "wait"

    # Not from toolplane: no details, so the status is all there is.
    bare = from_rpc_error(Failed(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses"))
    assert bare.reason == "grpc.unavailable" and not bare.retryable and bare.domain == ""
    # Details that contradict the call's own status are not trusted.
    forged = from_rpc_error(Failed(grpc.StatusCode.INTERNAL, "other", status))
    assert forged.reason == "grpc.internal"
