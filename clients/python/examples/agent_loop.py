"""An agent loop in Python over toolplane's host-driven mode, with OpenAI-format tools.

The host (this script) owns the model call; toolplane owns the tools. Each round, the request to
the model carries the invocation's tools (``tools`` + ``tool_choice``, exactly as the OpenAI Chat
Completions API takes them); the model's assistant message goes back to the runtime as is, and the
``role: tool`` messages it returns are appended to the conversation. The loop ends when the agent
calls ``workspace_finish``: the answer it committed is then in the chat.

It needs only the package (``pip install ./clients/python``); ``openai_agent.py`` is the same loop
with the OpenAI Python SDK. Run it against `toolplane up` and any OpenAI-compatible endpoint:

    OPENAI_API_KEY=… python examples/agent_loop.py --model gpt-4.1 "Write a haiku about tools."
    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 python examples/agent_loop.py --model qwen2.5 "…"

``model`` is any callable from a request body to an assistant message, so tests pass a fake one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request
from collections.abc import Callable
from typing import Any

from toolplane_client import Plane, common_pb2, connect

Model = Callable[[dict[str, Any]], dict[str, Any]]

SYSTEM = (
    "You work in a private workspace through your tools. Write your answer into output/main.md, "
    "publish it with workspace_commit, then call workspace_finish."
)
NUDGE = "Use your tools: publish the answer with workspace_commit, then call workspace_finish."


def run_agent(
    plane: Plane,
    model: Model,
    task: str,
    profile_id: str = "default",
    chat_id: str = "python",
    model_name: str = "model",
    max_rounds: int = 20,
) -> tuple[Any, list[dict[str, Any]]]:
    """Runs one host-driven run to its end; returns the run as it ended and the conversation."""
    run = plane.create_run(profile_id=profile_id, chat_id=chat_id)
    invocation = plane.open_invocation(run.run_id, "openai_chat")
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": task},
    ]
    for _ in range(max_rounds):
        request = {"model": model_name, "messages": messages, **invocation.tools}
        reply = model(request)
        messages.append(reply)
        if not reply.get("tool_calls"):
            # A text answer ends nothing: the run ends through its tools.
            messages.append({"role": "user", "content": NUDGE})
            continue
        turn = plane.execute_tool_calls(invocation, reply)
        messages.extend(turn.messages)
        messages.extend(turn.injected_messages)
        if not invocation.open:
            break
    else:
        plane.close_invocation(invocation, reason="the host's round limit was reached")
    return plane.get_run(run.run_id), messages


def openai_model(base_url: str, api_key: str | None, timeout: float = 120.0) -> Model:
    """A model callable for an OpenAI-compatible ``/chat/completions`` endpoint (stdlib only)."""

    def call(request: dict[str, Any]) -> dict[str, Any]:
        headers = {"content-type": "application/json"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        http = urllib.request.Request(
            base_url.rstrip("/") + "/chat/completions",
            data=json.dumps(request).encode(),
            headers=headers,
            method="POST",
        )
        with urllib.request.urlopen(http, timeout=timeout) as response:
            body = json.load(response)
        message = body["choices"][0]["message"]
        return {k: v for k, v in message.items() if v is not None}

    return call


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task")
    parser.add_argument("--model", default=os.environ.get("OPENAI_MODEL"), required="OPENAI_MODEL" not in os.environ)
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"))
    parser.add_argument("--profile", default="default")
    parser.add_argument("--chat", default="python")
    parser.add_argument("--runtime", default=os.environ.get("TOOLPLANE_RUNTIME_URL", "127.0.0.1:7410"))
    parser.add_argument("--catalog", default=os.environ.get("TOOLPLANE_CATALOG_URL", "127.0.0.1:7420"))
    parser.add_argument("--workspace", default=os.environ.get("TOOLPLANE_WORKSPACE_URL", "127.0.0.1:7430"))
    args = parser.parse_args()

    model = openai_model(args.base_url, os.environ.get("OPENAI_API_KEY"))
    with connect(runtime=args.runtime, catalog=args.catalog, workspace=args.workspace) as plane:
        run, _ = run_agent(plane, model, args.task, profile_id=args.profile, chat_id=args.chat, model_name=args.model)
        print(f"run {run.run_id}: {common_pb2.RunStatus.Name(run.status)}")
        chat = plane.chat_messages(args.chat)
        if run.committed and chat:
            print(chat[-1].content)
        return 0 if run.status == common_pb2.RUN_STATUS_COMPLETED else 1


if __name__ == "__main__":
    sys.exit(main())
