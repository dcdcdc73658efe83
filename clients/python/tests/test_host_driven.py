"""The Python client against a real plane (`conftest.py` starts `toolplane up`): the example agent
loop drives a host-driven run with OpenAI-format tools (a fake model of canned assistant messages
stands in for the real one) — write a file, commit it, finish — until the run has completed and the
answer is in the chat; a contract violation and a changing tool choice through the same client.
"""

from __future__ import annotations

import json
import time

import pytest
from agent_loop import run_agent
from toolplane_client import common_pb2, runtime_pb2
from toolplane_client.errors import FailedPreconditionError, InvalidArgumentError

NOTE = "# From Python\n\nWritten through toolplane's host-driven mode.\n"


class FakeModel:
    """A model that answers with canned assistant messages, in order, and records each request."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.requests = []

    def __call__(self, request):
        self.requests.append(request)
        assert self.replies, "the loop asked for more turns than were scripted"
        return self.replies.pop(0)


def call(call_id, name, arguments):
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}],
    }


WRITER = {"id": "py-writer", "tools": {"allow": ["builtin:workspace.*"], "maxRounds": 10}}


def test_a_host_driven_turn_writes_commits_and_finishes(plane):
    plane.put_profile(WRITER)
    model = FakeModel(
        [
            call("call_1", "workspace_write_file", {"path": "output/main.md", "content": NOTE}),
            call("call_2", "workspace_commit", {}),
            call("call_3", "workspace_finish", {"summary": "done"}),
        ]
    )
    run, messages = run_agent(plane, model, "Write a note.", profile_id="py-writer", chat_id="py-chat")

    assert run.status == common_pb2.RUN_STATUS_COMPLETED, run
    assert run.committed
    assert not model.replies, "every scripted turn was used"
    # The model was offered the tools in OpenAI's own shape.
    first = model.requests[0]
    names = [t["function"]["name"] for t in first["tools"]]
    assert "workspace_write_file" in names and "workspace_finish" in names
    assert first["tool_choice"] == "auto"
    # Each call's result came back as a `role: tool` message for that call id.
    tool_messages = [m for m in messages if m.get("role") == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_1", "call_2", "call_3"]
    assert "output/main.md" in tool_messages[0]["content"]
    # The committed answer is in the chat, and the journal tells the story.
    assert plane.chat_messages("py-chat")[-1].content == NOTE
    kinds = [e["type"] for e in plane.journal(run.run_id)]
    assert kinds[0] == "run_created" and kinds[-1] == "run_completed"
    assert kinds.count("tool_call_completed") == 3


def test_a_contract_violation_is_a_coded_error_and_fails_the_run(plane):
    plane.put_profile(WRITER)
    run = plane.create_run(profile_id="py-writer", chat_id="py-chat-2", background=True)
    invocation = plane.open_invocation(run.run_id, "openai_chat")
    with pytest.raises(FailedPreconditionError) as error:
        plane.execute_tool_calls(invocation, call("x1", "shell_exec", {}))
    assert error.value.reason == "model.unknown_tool_alias"
    assert invocation.state == runtime_pb2.INVOCATION_STATE_FAILED
    deadline = time.time() + 10
    while plane.get_run(run.run_id).status != common_pb2.RUN_STATUS_FAILED and time.time() < deadline:
        time.sleep(0.05)
    assert plane.get_run(run.run_id).failure.code == "model.unknown_tool_alias"


def test_a_host_changes_the_tool_choice_per_turn_and_text_turns_use_up_no_round(plane):
    plane.put_profile({"id": "py-brief", "tools": {"allow": ["builtin:workspace.*"], "maxRounds": 2}})
    run = plane.create_run(profile_id="py-brief", chat_id="py-chat-3", background=True)
    invocation = plane.open_invocation(run.run_id, "openai_chat")
    first = invocation.turn_id
    assert invocation.tools["tool_choice"] == "auto"

    with pytest.raises(InvalidArgumentError) as error:
        plane.execute_tool_calls(invocation, call("c0", "workspace_list_files", {}), next_tool_choice="builtin:nope.tool")
    assert error.value.reason == "runtime.invalid_request"
    assert invocation.open and invocation.turn_id == first

    text = {"role": "assistant", "content": "Let me think."}
    for _ in range(3):
        turn = plane.execute_tool_calls(invocation, text, next_tool_choice="none")
        assert turn.messages == [] and invocation.open
        assert invocation.turn_id == first, "a text answer keeps the turn"
    assert invocation.tools["tool_choice"] == "none"

    plane.execute_tool_calls(invocation, text, next_tool_choice="builtin:workspace.list_files")
    assert invocation.tools["tool_choice"] == {"type": "function", "function": {"name": "workspace_list_files"}}
    turn = plane.execute_tool_calls(invocation, call("c1", "workspace_list_files", {}))
    assert not turn.results[0].is_error and invocation.open and invocation.turn_id != first
    kinds = [e["type"] for e in plane.journal(run.run_id)]
    assert kinds.count("turn_without_calls") == 4
    assert kinds.count("tool_choice_changed") == 4
