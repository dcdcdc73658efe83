"""The OpenAI SDK example (`examples/openai_agent.py`) against the plane, with the SDK's own client:
its HTTP transport answers from a script of assistant messages instead of the network, so the
requests the SDK sends — the conversation and the tools toolplane offers — are what a real endpoint
would get, and each is checked against the SDK's request type."""

from __future__ import annotations

import json
import time

import httpx2 as httpx  # the HTTP client the OpenAI SDK is built on
import pydantic
from openai import OpenAI
from openai.types.chat import (
    ChatCompletionMessageParam,
    ChatCompletionToolChoiceOptionParam,
    ChatCompletionToolUnionParam,
)
from openai_agent import run_agent, sdk_model
from toolplane_client import common_pb2

NOTE = "# Through the OpenAI SDK\n"


def tool_call(call_id: str, name: str, arguments: dict) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


class ScriptedEndpoint:
    """`POST /chat/completions` answered with the next scripted message; records each body."""

    def __init__(self, replies: list[dict]):
        self.replies = list(replies)
        self.bodies: list[dict] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path.endswith("/chat/completions"), request.url
        self.bodies.append(json.loads(request.content))
        assert self.replies, "the loop asked for more turns than were scripted"
        message = self.replies.pop(0)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return httpx.Response(
            200,
            json={
                "id": f"chatcmpl-{len(self.bodies)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.bodies[-1]["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
            },
        )


def test_an_openai_sdk_loop_drives_a_host_driven_run(plane):
    plane.put_profile({"id": "py-sdk", "tools": {"allow": ["builtin:workspace.*"], "maxRounds": 10}})
    endpoint = ScriptedEndpoint(
        [
            tool_call("call_1", "workspace_write_file", {"path": "output/main.md", "content": NOTE}),
            {"role": "assistant", "content": "Written; publishing next."},
            tool_call("call_2", "workspace_commit", {}),
            tool_call("call_3", "workspace_finish", {"summary": "done"}),
        ]
    )
    client = OpenAI(api_key="test", base_url="http://model.invalid/v1", http_client=httpx.Client(transport=httpx.MockTransport(endpoint)))
    run, messages = run_agent(plane, sdk_model(client), "Write a note.", "gpt-test", profile_id="py-sdk", chat_id="py-sdk-chat")

    assert run.status == common_pb2.RUN_STATUS_COMPLETED and run.committed, run
    assert not endpoint.replies, "every scripted turn was used"
    # Every request the SDK sent is valid by the SDK's own types: its conversation, and the tools
    # and tool choice toolplane rendered. (Lists, not the SDK's `Iterable` fields, which pydantic
    # would only check when iterated.)
    messages_type = pydantic.TypeAdapter(list[ChatCompletionMessageParam])
    tools_type = pydantic.TypeAdapter(list[ChatCompletionToolUnionParam])
    choice_type = pydantic.TypeAdapter(ChatCompletionToolChoiceOptionParam)
    for body in endpoint.bodies:
        messages_type.validate_python(body["messages"])
        tools_type.validate_python(body["tools"])
        choice_type.validate_python(body["tool_choice"])
    first = endpoint.bodies[0]
    assert first["model"] == "gpt-test" and first["tool_choice"] == "auto"
    assert {"workspace_write_file", "workspace_commit", "workspace_finish"} <= {t["function"]["name"] for t in first["tools"]}
    # The conversation the last request carried: each tool call answered by its `role: tool`
    # message, the text answer followed by the loop's nudge.
    last = endpoint.bodies[-1]["messages"]
    assert [m["tool_call_id"] for m in last if m["role"] == "tool"] == ["call_1", "call_2"]
    assert [m["role"] for m in last[:5]] == ["system", "user", "assistant", "tool", "assistant"]
    assert last[5] == {"role": "user", "content": "Use your tools: publish the answer with workspace_commit, then call workspace_finish."}
    assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == ["call_1", "call_2", "call_3"]
    # The committed answer is in the chat.
    assert plane.chat_messages("py-sdk-chat")[-1].content == NOTE
