// A stdio MCP server whose tool list changes while it runs, written with the official TypeScript
// SDK, for the mcp-proxy's live-catalog tests (docs/mcp-proxy.md, "Live catalogs").
//
// At start it reads tool names, one per line, from the file named by LIVE_TOOLS_FILE; each such
// tool answers `<name>: ok`. Its `add_tool {name}` tool registers one more tool while the server
// runs, and the SDK sends `notifications/tools/list_changed` for it. A restarted server reads the
// file again, so a test changes the file and kills the process to give it another list. With
// LIVE_START_LOG set, it appends `started <pid>` to that file at start.
import { appendFileSync, readFileSync } from "node:fs";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer(
  { name: "live-tools", version: "1.0.0" },
  { capabilities: { tools: { listChanged: true } } },
);

function addTool(name) {
  server.registerTool(
    name,
    { description: `Answers that ${name} ran.`, inputSchema: {} },
    async () => ({ content: [{ type: "text", text: `${name}: ok` }] }),
  );
}

server.registerTool(
  "add_tool",
  {
    description: "Adds a tool named `name` to this server's tool list.",
    inputSchema: { name: z.string() },
  },
  async ({ name }) => {
    addTool(name);
    return { content: [{ type: "text", text: `added ${name}` }] };
  },
);

const file = process.env.LIVE_TOOLS_FILE;
if (file) {
  for (const line of readFileSync(file, "utf8").split("\n")) {
    const name = line.trim();
    if (name) addTool(name);
  }
}

if (process.env.LIVE_START_LOG) {
  appendFileSync(process.env.LIVE_START_LOG, `started ${process.pid}\n`);
}

await server.connect(new StdioServerTransport());
