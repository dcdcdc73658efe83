// The official MCP TypeScript SDK (npm `@modelcontextprotocol/sdk`) as a client of the plane's MCP
// face; the same plan and JSON report as tests/mcp-clients/python_client.py:
//
//   node mcp_face_client.mjs http URL [--token T]
//   node mcp_face_client.mjs stdio COMMAND [ARGS…]
//
// The plan comes on stdin; the report goes to stdout. The assertions live in the Rust test that
// runs it (services/toolplane/tests/plane/mcp_face.rs).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

function transportFor(kind, rest) {
  if (kind === "http") {
    const headers = rest[1] === "--token" ? { Authorization: `Bearer ${rest[2]}` } : {};
    return new StreamableHTTPClientTransport(new URL(rest[0]), { requestInit: { headers } });
  }
  if (kind === "stdio") {
    return new StdioClientTransport({ command: rest[0], args: rest.slice(1), stderr: "inherit" });
  }
  throw new Error(`unknown transport ${kind}`);
}

async function main() {
  const plan = await readStdin();
  const [kind, ...rest] = process.argv.slice(2);
  const transport = transportFor(kind, rest);
  const client = new Client({ name: "toolplane-ts-test", version: "1.0.0" });
  await client.connect(transport);
  const report = { calls: [], protocolVersion: transport.protocolVersion ?? null };
  const listed = await client.listTools();
  report.tools = listed.tools;
  for (const call of plan.calls) {
    let result;
    try {
      result = await client.callTool({ name: call.name, arguments: call.arguments ?? {} });
    } catch (e) {
      report.calls.push({ name: call.name, error: { code: e.code, message: String(e.message) } });
      continue;
    }
    const entry = { ...result, name: call.name };
    entry.texts = result.content.filter((c) => c.type === "text").map((c) => c.text);
    entry.links = result.content.filter((c) => c.type === "resource_link").map((c) => c.uri);
    if (plan.read_links) {
      entry.linkTexts = [];
      for (const uri of entry.links) {
        const read = await client.readResource({ uri });
        entry.linkTexts.push(read.contents.map((c) => c.text ?? "").join(""));
      }
    }
    report.calls.push(entry);
  }
  if (kind === "http") await transport.terminateSession();
  await client.close();
  process.stdout.write(JSON.stringify(report));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
