"""What both clients add on the channel, against a stand-in runtime served by grpcio in-process (no
plane needed): the bearer token on unary and streaming calls, the per-call timeout, and a status
with `RetryInfo` read into the typed error."""

from __future__ import annotations

import asyncio
import time
from concurrent import futures

import grpc
import pytest
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from toolplane.v1 import journal_pb2, runtime_pb2_grpc
from toolplane_client import aio as tp_aio
from toolplane_client import connect, runtime_pb2
from toolplane_client.errors import DeadlineExceededError, UnavailableError


def header(context) -> str:
    return dict(context.invocation_metadata()).get("authorization", "")


class StandIn(runtime_pb2_grpc.RuntimeServiceServicer):
    """GetRun answers the caller's authorization header as the run id, `slow` after 2 s, and
    `busy` with UNAVAILABLE + ErrorInfo + RetryInfo; WatchRun sends one event typed as the header."""

    def GetRun(self, request, context):
        if request.run_id == "slow":
            time.sleep(2)
        if request.run_id == "busy":
            info, retry = any_pb2.Any(), any_pb2.Any()
            info.Pack(error_details_pb2.ErrorInfo(reason="runtime.dependency_unavailable", domain="toolplane.dev", metadata={"service": "runtime"}))
            retry.Pack(error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=1, nanos=500_000_000)))
            context.abort_with_status(
                rpc_status.to_status(
                    status_pb2.Status(code=code_pb2.UNAVAILABLE, message="runtime.dependency_unavailable: the workspace did not answer", details=[info, retry])
                )
            )
        return runtime_pb2.GetRunResponse(run=runtime_pb2.Run(run_id=header(context)))

    def WatchRun(self, request, context):
        yield runtime_pb2.WatchRunResponse(event=journal_pb2.JournalEvent(seq=1, type=header(context)))


@pytest.fixture(scope="module")
def runtime_address():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    runtime_pb2_grpc.add_RuntimeServiceServicer_to_server(StandIn(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(grace=None)


def test_the_blocking_client_sends_the_token_and_bounds_each_call(runtime_address, monkeypatch):
    monkeypatch.delenv("TOOLPLANE_TOKEN", raising=False)
    with connect(runtime=runtime_address, token="secret-1", timeout=0.5) as plane:
        assert plane.get_run("who").run_id == "Bearer secret-1"
        assert [e["type"] for e in plane.journal("who")] == ["Bearer secret-1"]
        with pytest.raises(DeadlineExceededError) as late:
            plane.get_run("slow")
        assert late.value.reason == "grpc.deadline_exceeded"
        with pytest.raises(UnavailableError) as busy:
            plane.get_run("busy")
    assert busy.value.reason == "runtime.dependency_unavailable"
    assert busy.value.retryable and busy.value.retry_delay.total_seconds() == 1.5
    with connect(runtime=runtime_address, token=None) as anonymous:
        assert anonymous.get_run("who").run_id == ""


def test_the_async_client_sends_the_token_and_bounds_each_call(runtime_address, monkeypatch):
    monkeypatch.setenv("TOOLPLANE_TOKEN", "secret-2")

    async def main():
        async with tp_aio.connect(runtime=runtime_address, timeout=0.5) as plane:
            assert (await plane.get_run("who")).run_id == "Bearer secret-2"
            assert [e["type"] for e in await plane.journal("who")] == ["Bearer secret-2"]
            with pytest.raises(DeadlineExceededError) as late:
                await plane.get_run("slow")
            assert late.value.reason == "grpc.deadline_exceeded"
            with pytest.raises(UnavailableError) as busy:
                await plane.get_run("busy")
            assert busy.value.reason == "runtime.dependency_unavailable"
            assert busy.value.metadata == {"service": "runtime"}
            assert busy.value.retry_delay.total_seconds() == 1.5

    asyncio.run(main())
