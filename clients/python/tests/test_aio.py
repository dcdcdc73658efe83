"""The asyncio client against the same plane: the same surface as the blocking one, a host-driven
turn through it, the journal as an async stream, and the same typed errors."""

from __future__ import annotations

import asyncio
import inspect
import json

import pytest
from toolplane_client import Plane, common_pb2, runtime_pb2
from toolplane_client.aio import AsyncPlane, connect
from toolplane_client.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError

NOTE = "# From asyncio\n"


def public(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(cls, callable)
        if not name.startswith("_")
    }


def test_the_async_client_has_the_blocking_client_surface():
    sync, aio = public(Plane), public(AsyncPlane)
    assert sync.keys() == aio.keys()
    assert "execute_tool_calls" in aio and "watch" in aio
    for name, signature in sync.items():
        assert aio[name].parameters == signature.parameters, name
        member = getattr(AsyncPlane, name)
        if name == "watch":
            assert inspect.isasyncgenfunction(member)
        else:
            assert inspect.iscoroutinefunction(member), f"AsyncPlane.{name} is not a coroutine function"


def call(call_id: str, name: str, arguments: dict) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}],
    }


def test_a_host_driven_run_through_asyncio(addresses):
    async def main():
        async with connect(**addresses) as plane:
            await plane.wait_ready(timeout=30)
            await plane.put_profile({"id": "py-aio", "tools": {"allow": ["builtin:workspace.*"], "maxRounds": 10}})
            run = await plane.create_run(profile_id="py-aio", chat_id="py-aio-chat")
            invocation = await plane.open_invocation(run.run_id, "openai_chat")
            names = [t["function"]["name"] for t in invocation.tools["tools"]]
            assert "workspace_write_file" in names

            # Two runs' reads at once on one channel: asyncio's point.
            other = await plane.create_run(profile_id="py-aio", chat_id="py-aio-other", background=True)
            got, again = await asyncio.gather(plane.get_run(run.run_id), plane.get_run(other.run_id))
            assert (got.run_id, again.run_id) == (run.run_id, other.run_id)

            steps = [
                call("a1", "workspace_write_file", {"path": "output/main.md", "content": NOTE}),
                call("a2", "workspace_commit", {}),
                call("a3", "workspace_finish", {"summary": "done"}),
            ]
            for step in steps:
                turn = await plane.execute_tool_calls(invocation, step)
                assert [m["tool_call_id"] for m in turn.messages] == [step["tool_calls"][0]["id"]]
            assert turn.finished and not invocation.open

            done = await plane.get_run(run.run_id)
            assert done.status == common_pb2.RUN_STATUS_COMPLETED and done.committed
            assert (await plane.chat_messages("py-aio-chat"))[-1].content == NOTE
            kinds = [e["type"] async for e in plane.watch(run.run_id, history_only=True)]
            assert kinds[0] == "run_created" and kinds[-1] == "run_completed"
            assert kinds == [e["type"] for e in await plane.journal(run.run_id)]

    asyncio.run(main())


def test_async_failures_are_the_same_typed_errors(addresses):
    async def main():
        async with connect(**addresses) as plane:
            with pytest.raises(NotFoundError) as missing:
                await plane.get_run("run-none")
            assert missing.value.reason == "runtime.not_found"
            assert missing.value.metadata["service"] == "runtime"

            with pytest.raises(NotFoundError) as streamed:
                await plane.journal("run-none")
            assert streamed.value.reason == "runtime.not_found", "a stream's failure is typed too"

            await plane.put_profile({"id": "py-aio-2", "tools": {"allow": ["builtin:workspace.*"]}})
            run = await plane.create_run(profile_id="py-aio-2", chat_id="py-aio-3", background=True)
            invocation = await plane.open_invocation(run.run_id, "openai_chat")
            with pytest.raises(InvalidArgumentError) as invalid:
                await plane.execute_tool_calls(invocation, call("b0", "workspace_list_files", {}), next_tool_choice="builtin:nope.tool")
            assert invalid.value.reason == "runtime.invalid_request" and invalid.value.field_violations
            assert invocation.open, "a malformed request fails nothing"
            with pytest.raises(FailedPreconditionError) as violated:
                await plane.execute_tool_calls(invocation, call("b1", "shell_exec", {}))
            assert violated.value.reason == "model.unknown_tool_alias"
            assert invocation.state == runtime_pb2.INVOCATION_STATE_FAILED

    asyncio.run(main())
