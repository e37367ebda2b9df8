// Drives an AG-UI interrupt and its resume through toolgate with the stock
// @ag-ui/client HttpAgent: the first run calls `write_file` (which the
// server is configured to hold for approval) and a frontend tool, and ends
// interrupted; the second run answers both interrupts in `resume` (the
// approval approved, the frontend call's result as the payload) and must
// finish as a success with the write's result.
//
// Usage:
//   node interrupt.mjs --base http://127.0.0.1:PORT --thread THREAD
// The token comes from $TOOLGATE_TOKEN (or --token).
//
// Prints ONE JSON line on stdout:
//   {ids, first: {types, results, finishedParams, runError}, second: {same},
//    resume, warnings}
// and exits 0 only when both runs ended with RUN_FINISHED, no error was
// thrown, and the client printed no warning. Errors go to stderr.

import { HttpAgent } from "@ag-ui/client";
import { randomUUID } from "node:crypto";

import { parseArgs, captureWarnings } from "./lib.mjs";

const args = parseArgs(process.argv.slice(2), {
  base: process.env.TOOLGATE_BASE,
  token: process.env.TOOLGATE_TOKEN,
  thread: process.env.TOOLGATE_THREAD,
});
for (const required of ["base", "token", "thread"]) {
  if (!args[required]) {
    console.error(`interrupt.mjs: missing --${required}`);
    process.exit(2);
  }
}

const warnings = captureWarnings();
const frontendTool = {
  name: "pick_colour",
  description: "Ask the person to pick a colour.",
  parameters: { type: "object", properties: {}, required: [] },
};
const ids = {
  write: `call_write_${randomUUID()}`,
  pick: `call_pick_${randomUUID()}`,
};

const agent = new HttpAgent({
  url: `${args.base}/v1/threads/${encodeURIComponent(args.thread)}/runs`,
  headers: { Authorization: `Bearer ${args.token}` },
  threadId: args.thread,
});
agent.setMessages([
  { id: `msg_user_${randomUUID()}`, role: "user", content: "Pick a colour and save it." },
  {
    id: `msg_assistant_${randomUUID()}`,
    role: "assistant",
    toolCalls: [
      {
        id: ids.pick,
        type: "function",
        function: { name: frontendTool.name, arguments: "{}" },
      },
      {
        id: ids.write,
        type: "function",
        function: {
          name: "write_file",
          arguments: JSON.stringify({ path: "colour.txt", content: "teal" }),
        },
      },
    ],
  },
]);

/** One runAgent call; records the event types and how the run ended. */
async function runOnce(parameters) {
  const seen = { types: [], results: [], finishedParams: null, runError: null };
  await agent.runAgent(
    { runId: `run_${randomUUID()}`, tools: [frontendTool], ...parameters },
    {
      onEvent: ({ event }) => {
        seen.types.push(event.type);
        if (event.type === "TOOL_CALL_RESULT") {
          seen.results.push({ toolCallId: event.toolCallId, content: event.content });
        }
      },
      onRunFinishedEvent: (params) => {
        // The client hands subscribers the outcome's type and, for an
        // interrupt, the interrupts it will expect `resume` to answer.
        seen.finishedParams = structuredClone({
          outcome: params.outcome,
          interrupts: params.interrupts,
          event: params.event.outcome,
        });
      },
      onRunErrorEvent: ({ event }) => {
        seen.runError = structuredClone(event);
      },
    },
  );
  return seen;
}

let stage = "first run";
try {
  const first = await runOnce({});
  const interrupts = first.finishedParams?.interrupts ?? [];
  const resume = interrupts.map((interrupt) =>
    interrupt.reason === "approval_required"
      ? { interruptId: interrupt.id, status: "resolved", payload: { decision: "approve" } }
      : { interruptId: interrupt.id, status: "resolved", payload: { colour: "teal" } },
  );
  stage = "second run";
  const second = await runOnce({ resume });
  process.stdout.write(
    JSON.stringify({ ids, first, second, resume, warnings: warnings.list }) + "\n",
  );
  const problems = [];
  for (const [name, turn] of [["first run", first], ["second run", second]]) {
    if (turn.runError) problems.push(`${name}: RUN_ERROR ${JSON.stringify(turn.runError)}`);
    if (!turn.types.includes("RUN_FINISHED")) problems.push(`${name}: no RUN_FINISHED event`);
  }
  if (warnings.list.length > 0) {
    problems.push(`the client had to fix events: ${JSON.stringify(warnings.list)}`);
  }
  if (problems.length > 0) {
    console.error(`interrupt.mjs: ${problems.join("; ")}`);
    process.exitCode = 1;
  }
} catch (error) {
  console.error(`interrupt.mjs: HttpAgent.runAgent failed in the ${stage}: ${error?.stack ?? error}`);
  process.exitCode = 1;
}
