"""The official MCP Python SDK (PyPI `mcp`) as a client of the plane's MCP face.

    python_client.py http URL [--token T]      streamable HTTP (`/mcp?profile=…`)
    python_client.py stdio COMMAND [ARGS…]     a stdio server, e.g. `toolplane mcp serve --stdio …`

Lists the tools, then calls each tool named in the JSON plan read from stdin, in order:
`{"calls": [{"name": "dice_roll", "arguments": {...}}, ...], "read_links": true, "relist": true}`
(`relist`: list the tools again after the calls, as `toolsAfter`). Prints one
JSON report on stdout: the listed tools (name, title, annotations) and, per call, either the
result (isError, text, structuredContent, _meta, resource links, and the text of each link read
back with `resources/read` when `read_links`) or the protocol error (code, message), and the
methods of the notifications the server sent (`notifications`). The
assertions live in the Rust test that runs it (services/toolplane/tests/plane/mcp_face.rs).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError


def dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def run(target: Any, plan: dict[str, Any]) -> dict[str, Any]:
    report: dict[str, Any] = {"calls": [], "notifications": []}

    async def on_message(message: Any) -> None:
        notification = getattr(message, "root", message)
        method = getattr(notification, "method", None)
        if isinstance(method, str):
            report["notifications"].append(method)

    async with Client(target, mode="auto", message_handler=on_message) as client:
        report["protocolVersion"] = client.protocol_version
        listed = await client.list_tools()
        report["tools"] = [dump(t) for t in listed.tools]
        for call in plan["calls"]:
            try:
                result = await client.call_tool(call["name"], call.get("arguments") or {})
            except MCPError as e:
                report["calls"].append({"name": call["name"], "error": {"code": e.code, "message": str(e)}})
                continue
            entry = dump(result)
            entry["name"] = call["name"]
            entry["texts"] = [c.text for c in result.content if getattr(c, "type", "") == "text"]
            entry["links"] = [str(c.uri) for c in result.content if getattr(c, "type", "") == "resource_link"]
            if plan.get("read_links"):
                entry["linkTexts"] = []
                for uri in entry["links"]:
                    read = await client.read_resource(uri)
                    entry["linkTexts"].append("".join(getattr(c, "text", "") for c in read.contents))
            report["calls"].append(entry)
        if plan.get("relist"):
            # Let a notification sent with the last answer arrive first.
            await asyncio.sleep(0.2)
            report["toolsAfter"] = [dump(t) for t in (await client.list_tools()).tools]
    return report


def main() -> None:
    plan = json.load(sys.stdin)
    kind, rest = sys.argv[1], sys.argv[2:]
    if kind == "http":
        url = rest[0]
        headers = {}
        if len(rest) > 2 and rest[1] == "--token":
            headers["Authorization"] = f"Bearer {rest[2]}"
        http = httpx2.AsyncClient(headers=headers, timeout=60)
        target: Any = streamable_http_client(url, http_client=http)
    elif kind == "stdio":
        target = StdioServerParameters(command=rest[0], args=rest[1:])
    else:
        raise SystemExit(f"unknown transport {kind}")
    report = asyncio.run(run(target, plan))
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
