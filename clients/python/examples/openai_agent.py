"""An agent loop with the OpenAI Python SDK over toolplane's host-driven mode.

The host (this script) calls the model through the SDK; toolplane owns the tools. The conversation
is a list of the SDK's own message types; each round the invocation's ``tools`` and
``tool_choice`` go to ``client.chat.completions.create`` as they are (toolplane renders them in
the Chat Completions shape), the ``ChatCompletion``'s assistant message goes back to the runtime,
and the ``role: tool`` messages it returns are appended. The whole response is stored with the
turn for audit. The loop ends when the agent calls ``workspace_finish``; the answer it committed
is then in the chat.

    pip install ./clients/python openai
    OPENAI_API_KEY=… python clients/python/examples/openai_agent.py --model gpt-4.1 "Write a haiku."

``complete`` is any callable taking ``chat.completions.create``'s keyword arguments and returning
a ``ChatCompletion``; the test passes an SDK client whose HTTP transport answers from a script, so
nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any, cast

from openai import OpenAI
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionAssistantMessageParam,
    ChatCompletionMessageParam,
    ChatCompletionToolChoiceOptionParam,
    ChatCompletionToolMessageParam,
    ChatCompletionToolUnionParam,
)
from toolplane_client import Plane, common_pb2, connect

Complete = Callable[..., ChatCompletion]

SYSTEM = (
    "You work in a private workspace through your tools. Write your answer into output/main.md, "
    "publish it with workspace_commit, then call workspace_finish."
)
NUDGE = "Use your tools: publish the answer with workspace_commit, then call workspace_finish."


def sdk_model(client: OpenAI) -> Complete:
    """``complete`` for an OpenAI SDK client (any OpenAI-compatible endpoint)."""
    return client.chat.completions.create


def run_agent(
    plane: Plane,
    complete: Complete,
    task: str,
    model: str,
    profile_id: str = "default",
    chat_id: str = "python",
    max_rounds: int = 20,
) -> tuple[Any, list[ChatCompletionMessageParam]]:
    """Runs one host-driven run to its end; returns the run as it ended and the conversation."""
    run = plane.create_run(profile_id=profile_id, chat_id=chat_id)
    invocation = plane.open_invocation(run.run_id, "openai_chat")
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": task},
    ]
    for _ in range(max_rounds):
        tools = cast("list[ChatCompletionToolUnionParam]", invocation.tools["tools"])
        tool_choice = cast(ChatCompletionToolChoiceOptionParam, invocation.tools["tool_choice"])
        completion = complete(model=model, messages=messages, tools=tools, tool_choice=tool_choice)
        reply = completion.choices[0].message
        assistant = cast(ChatCompletionAssistantMessageParam, reply.model_dump(mode="json", exclude_none=True))
        messages.append(assistant)
        if not reply.tool_calls:
            # A text answer ends nothing: the run ends through its tools.
            messages.append({"role": "user", "content": NUDGE})
            continue
        turn = plane.execute_tool_calls(invocation, assistant, model_response=completion.model_dump(mode="json"))
        messages.extend(cast("list[ChatCompletionToolMessageParam]", turn.messages))
        messages.extend(turn.injected_messages)
        if not invocation.open:
            break
    else:
        plane.close_invocation(invocation, reason="the host's round limit was reached")
    return plane.get_run(run.run_id), messages


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("task")
    parser.add_argument("--model", default=os.environ.get("OPENAI_MODEL"), required="OPENAI_MODEL" not in os.environ)
    parser.add_argument("--profile", default="default")
    parser.add_argument("--chat", default="python")
    parser.add_argument("--runtime", default=os.environ.get("TOOLPLANE_RUNTIME_URL", "127.0.0.1:7410"))
    parser.add_argument("--catalog", default=os.environ.get("TOOLPLANE_CATALOG_URL", "127.0.0.1:7420"))
    parser.add_argument("--workspace", default=os.environ.get("TOOLPLANE_WORKSPACE_URL", "127.0.0.1:7430"))
    args = parser.parse_args()

    complete = sdk_model(OpenAI())  # OPENAI_API_KEY, OPENAI_BASE_URL
    with connect(runtime=args.runtime, catalog=args.catalog, workspace=args.workspace) as plane:
        run, _ = run_agent(plane, complete, args.task, args.model, profile_id=args.profile, chat_id=args.chat)
        print(f"run {run.run_id}: {common_pb2.RunStatus.Name(run.status)}")
        chat = plane.chat_messages(args.chat)
        if run.committed and chat:
            print(chat[-1].content)
        return 0 if run.status == common_pb2.RUN_STATUS_COMPLETED else 1


if __name__ == "__main__":
    sys.exit(main())
