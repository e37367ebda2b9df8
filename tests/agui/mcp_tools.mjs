// Fetches toolgate's MCP tool listing (GET /v1/tools?format=mcp) and checks
// it with the official MCP TypeScript SDK (@modelcontextprotocol/sdk), not
// our reading of the spec:
//   1. the answer's `tools` as a tools/list result: ListToolsResultSchema,
//      the zod schema the SDK's Client parses a tools/list answer with;
//   2. every tool on its own with ToolSchema (its failures name the tool);
//   3. anything those schemas would drop without a word (a key ToolSchema,
//      ToolAnnotationsSchema, … do not know: zod strips it) is a warning,
//      and so is a name the SDK's own tool-name check (SEP-986) warns about;
//   4. the stock Client's listTools() over an in-memory transport, served by
//      the SDK's Server answering tools/list with the listing as fetched:
//      the same parse, plus the Client compiling each outputSchema with its
//      default JSON Schema validator. Every inputSchema is compiled with that
//      validator too (AjvJsonSchemaValidator), as a client checking its
//      arguments before a call would.
// Nothing is fixed up on the way: the tools are taken as toolgate sent them.
//
// Usage:
//   node mcp_tools.mjs --base http://127.0.0.1:PORT
// The token comes from $TOOLGATE_TOKEN (or --token); the base may also come
// from $TOOLGATE_BASE.
//
// Prints ONE JSON line on stdout:
//   {ok, count, names, failures, warnings, tools}
// each failure and warning an object {kind, tool?, ...}, `tools` the tools
// as the Client's listTools() returned them (null if it failed); exits 0 only
// when the SDK accepted every tool (`ok`). Warnings do not change the exit
// status; the caller decides what to make of them. Errors go to stderr.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { validateToolName } from "@modelcontextprotocol/sdk/shared/toolNameValidation.js";
import {
  ListToolsRequestSchema,
  ListToolsResultSchema,
  ToolSchema,
} from "@modelcontextprotocol/sdk/types.js";
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/ajv";

import { parseArgs, captureWarnings } from "./lib.mjs";

const args = parseArgs(process.argv.slice(2), {
  base: process.env.TOOLGATE_BASE,
  token: process.env.TOOLGATE_TOKEN,
});
for (const required of ["base", "token"]) {
  if (!args[required]) {
    console.error(`mcp_tools.mjs: missing --${required}`);
    process.exit(2);
  }
}

const consoleWarnings = captureWarnings();
const failures = [];
const warnings = [];
let tools = [];
let clientTools = null; // the listing as the SDK's Client hands it over

const isPlainObject = (v) => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * The paths of every key in `sent` that is gone from `parsed`: what the
 * schema stripped because it does not know it. Keys a schema keeps
 * (catchall, loose objects) are not reported.
 */
function droppedKeys(sent, parsed, path = "") {
  const out = [];
  if (Array.isArray(sent) && Array.isArray(parsed)) {
    sent.forEach((item, i) => out.push(...droppedKeys(item, parsed[i], `${path}[${i}]`)));
  } else if (isPlainObject(sent) && isPlainObject(parsed)) {
    for (const [key, value] of Object.entries(sent)) {
      const at = path ? `${path}.${key}` : key;
      if (!Object.hasOwn(parsed, key)) out.push(at);
      else out.push(...droppedKeys(value, parsed[key], at));
    }
  }
  return out;
}

const toolName = (tool, index) =>
  isPlainObject(tool) && typeof tool.name === "string" ? tool.name : `#${index}`;

try {
  const url = `${args.base}/v1/tools?format=mcp`;
  const response = await fetch(url, {
    headers: { Authorization: `Bearer ${args.token}`, Accept: "application/json" },
  });
  const text = await response.text();
  if (response.status !== 200) {
    throw new Error(`GET ${url} answered ${response.status}: ${text}`);
  }
  const body = JSON.parse(text);
  if (body.format !== "mcp") {
    failures.push({ kind: "format", detail: `format is ${JSON.stringify(body.format)}, not "mcp"` });
  }
  if (!Array.isArray(body.tools)) {
    throw new Error(`no tools array in the answer: ${text.slice(0, 500)}`);
  }
  tools = body.tools;

  // 1. The listing as a whole, as the Client parses a tools/list result.
  const listed = ListToolsResultSchema.safeParse({ tools: structuredClone(tools) });
  if (!listed.success) {
    failures.push({ kind: "ListToolsResultSchema", issues: listed.error.issues });
  }

  // 2 and 3. Each tool on its own, and what the schema would throw away.
  const seen = new Map();
  tools.forEach((tool, index) => {
    const name = toolName(tool, index);
    if (seen.has(name)) {
      failures.push({ kind: "duplicate-name", tool: name, index, first: seen.get(name) });
    } else {
      seen.set(name, index);
    }
    const parsed = ToolSchema.safeParse(structuredClone(tool));
    if (!parsed.success) {
      failures.push({ kind: "ToolSchema", tool: name, index, issues: parsed.error.issues });
      return;
    }
    for (const path of droppedKeys(tool, parsed.data)) {
      warnings.push({
        kind: "stripped",
        tool: name,
        path,
        detail: "the SDK's ToolSchema does not know this key and drops it",
      });
    }
    const naming = validateToolName(parsed.data.name);
    if (!naming.isValid) {
      failures.push({ kind: "tool-name", tool: name, issues: naming.warnings });
    } else if (naming.warnings.length > 0) {
      warnings.push({ kind: "tool-name", tool: name, detail: naming.warnings });
    }
    try {
      new AjvJsonSchemaValidator().getValidator(parsed.data.inputSchema);
    } catch (error) {
      failures.push({
        kind: "inputSchema-compile",
        tool: name,
        detail: String(error?.message ?? error),
      });
    }
  });

  // 4. The stock Client, end to end, against the SDK's own Server.
  const server = new Server(
    { name: "toolgate-listing", version: "0.0.0" },
    { capabilities: { tools: {} } },
  );
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: structuredClone(tools) }));
  const client = new Client({ name: "toolgate-conformance", version: "0.0.0" });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  try {
    await server.connect(serverSide);
    await client.connect(clientSide);
    const result = await client.listTools();
    clientTools = result.tools;
    const got = result.tools.map((t) => t.name);
    const sent = tools.map(toolName);
    if (JSON.stringify(got) !== JSON.stringify(sent)) {
      failures.push({ kind: "client", detail: "the client's tool list differs", sent, got });
    }
  } catch (error) {
    failures.push({ kind: "client", detail: String(error?.message ?? error) });
  } finally {
    await client.close().catch(() => {});
    await server.close().catch(() => {});
  }
} catch (error) {
  failures.push({ kind: "fetch", detail: String(error?.message ?? error) });
  console.error(`mcp_tools.mjs: ${error?.stack ?? error}`);
}

// Whatever the SDK itself warned about on the way.
for (const line of consoleWarnings.list) warnings.push({ kind: "console", detail: line });

const report = {
  ok: failures.length === 0,
  count: tools.length,
  names: tools.map(toolName),
  failures,
  warnings,
  tools: clientTools,
};
process.stdout.write(JSON.stringify(report) + "\n");
if (!report.ok) {
  console.error(`mcp_tools.mjs: the MCP SDK rejected the listing (${failures.length} failure(s))`);
  process.exitCode = 1;
}
