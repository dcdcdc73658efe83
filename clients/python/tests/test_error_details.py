"""A Python client of its own, generated from proto/, decides what to do about failures of every
service from `google.rpc.ErrorInfo.reason` alone, read with `grpcio-status` (docs/errors.md,
"Error details"), and retries a create with its `request_id` without creating twice.
"""

from __future__ import annotations

import sys
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from test_host_driven import plane  # noqa: E402,F401  (the same plane fixture)
from toolplane.v1 import (  # noqa: E402
    catalog_pb2,
    common_pb2,
    mcp_proxy_pb2,
    profile_pb2,
    runtime_pb2,
    workspace_pb2,
)

ACTIONS = {
    "runtime.not_found": "create",
    "profile.not_found": "create",
    "catalog.tool_not_found": "create",
    "mcp.server_not_found": "create",
    "workspace.run_not_found": "create",
    "workspace.not_found": "create",
    "profile.version_conflict": "reread",
    "runtime.invalid_request": "fix",
    "request.invalid_page_token": "fix",
    "request.idempotency_mismatch": "fix",
    "profile.invalid": "fix",
    "policy.invalid": "fix",
    "tool.invalid_id": "fix",
    "mcp.invalid_registration": "fix",
    "workspace.invalid_request": "fix",
}


def details(error: grpc.RpcError):
    """The status's ErrorInfo and BadRequest, checking what every toolplane status carries."""
    status = rpc_status.from_call(error)
    assert status is not None, f"no error details: {error}"
    info = bad = None
    for any_detail in status.details:
        if any_detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            any_detail.Unpack(info)
        elif any_detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            any_detail.Unpack(bad)
    assert info is not None, f"no ErrorInfo: {error}"
    assert info.domain == "toolplane.dev"
    assert error.details().startswith(info.reason + ": ")
    assert not error.details()[len(info.reason) + 2 :].startswith(info.reason + ":")
    if error.code() == grpc.StatusCode.INVALID_ARGUMENT:
        assert bad is not None and bad.field_violations, f"no BadRequest: {error}"
    return info, bad


def fail(method, request) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        method(request)
    return caught.value


def test_a_client_branches_on_error_info_reason_alone(plane):
    plane.put_profile({"id": "py1", "tools": {"allow": ["builtin:dice.roll"]}})
    cases = [
        (plane.runtime.GetRun, runtime_pb2.GetRunRequest(run_id="run-none"), "create"),
        (plane.runtime.StartRun, runtime_pb2.StartRunRequest(), "fix"),
        (plane.runtime.ListRuns, runtime_pb2.ListRunsRequest(page_token="50"), "fix"),
        (plane.profiles.GetProfile, profile_pb2.GetProfileRequest(profile_id="nope"), "create"),
        (plane.profiles.PutProfile, profile_pb2.PutProfileRequest(profile_id="py2", profile_json="{"), "fix"),
        (
            plane.profiles.PutProfile,
            profile_pb2.PutProfileRequest(
                profile_id="py1",
                profile_json='{"id": "py1", "tools": {"allow": ["*"]}}',
                expected_version=9,
            ),
            "reread",
        ),
        (plane.profiles.PutPlatformPolicy, profile_pb2.PutPlatformPolicyRequest(policy_json="[]"), "fix"),
        (plane.catalog.GetTool, catalog_pb2.GetToolRequest(tool_id="builtin:no.such_tool"), "create"),
        (plane.catalog.GetTool, catalog_pb2.GetToolRequest(tool_id="no colon"), "fix"),
        (
            plane.mcp.GetServer,
            mcp_proxy_pb2.GetServerRequest(server_id="00000000-0000-4000-8000-000000000000"),
            "create",
        ),
        (plane.mcp.UpsertServer, mcp_proxy_pb2.UpsertServerRequest(display_name="x"), "fix"),
        (
            plane.workspace.ReadJournal,
            workspace_pb2.ReadJournalRequest(run_id="run-none", from_seq=1, page_size=10),
            "create",
        ),
        (plane.workspace.GetRunWorkspace, workspace_pb2.GetRunWorkspaceRequest(), "fix"),
    ]
    reasons = set()
    for method, request, want in cases:
        info, _ = details(fail(method, request))
        assert ACTIONS.get(info.reason) == want, f"{request!r}: {info.reason}"
        reasons.add(info.reason)
    assert len(reasons) >= 10, reasons


def test_a_retried_create_with_its_request_id_creates_once(plane):
    plane.put_profile({"id": "py3", "tools": {"allow": ["builtin:dice.roll"]}})
    request = runtime_pb2.CreateRunRequest(
        profile_id="py3",
        chat=common_pb2.ChatBinding(chat_id="py-chat"),
        mode=common_pb2.RUN_MODE_BACKGROUND,
        request_id="py-create-1",
    )
    first = plane.runtime.CreateRun(request)
    again = plane.runtime.CreateRun(request)
    assert first.run.run_id == again.run.run_id
    request.profile_id = "py1"
    info, bad = details(fail(plane.runtime.CreateRun, request))
    assert info.reason == "request.idempotency_mismatch"
    assert bad.field_violations[0].field == "request_id"
