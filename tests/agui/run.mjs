// Drives toolgate's AG-UI agent endpoint (POST /v1/threads/{thread}/runs)
// with the stock @ag-ui/client HttpAgent, unmodified: the client's own
// enforcement (schema validation, stripping of unknown fields with a
// warning) and verification (event ordering) run on every event.
//
// Usage:
//   node run.mjs --base http://127.0.0.1:PORT --thread THREAD [--run-id RUN]
// The token comes from $TOOLGATE_TOKEN (or --token); base and thread may
// also come from $TOOLGATE_BASE and $TOOLGATE_THREAD.
//
// Two turns: the first run carries a user message, a reasoning message and
// an assistant message calling `echo`, `wait` and a frontend tool listed in
// `tools`; then the
// application answers the frontend call with a tool message and runs again.
//
// Prints ONE JSON line on stdout, the first run's record at the top level:
//   {ids, types, events, toolCallResults, runFinished, runError,
//    finishedParams, messages, newMessages, second: {same for run 2},
//    warnings}
// and exits 0 only when both runs completed with RUN_FINISHED, no error was
// thrown, and the client printed no warning (a warning means it had to strip
// or translate something toolgate sent). Errors go to stderr.

import { HttpAgent } from "@ag-ui/client";
import { randomUUID } from "node:crypto";

import { parseArgs, captureWarnings } from "./lib.mjs";

const args = parseArgs(process.argv.slice(2), {
  base: process.env.TOOLGATE_BASE,
  token: process.env.TOOLGATE_TOKEN,
  thread: process.env.TOOLGATE_THREAD,
  "run-id": undefined,
});
for (const required of ["base", "token", "thread"]) {
  if (!args[required]) {
    console.error(`run.mjs: missing --${required}`);
    process.exit(2);
  }
}

const warnings = captureWarnings();
const thread = args.thread;
const runId = args["run-id"] ?? `run_${randomUUID()}`;
const ids = {
  user: `msg_user_${randomUUID()}`,
  reasoning: `msg_reasoning_${randomUUID()}`,
  assistant: `msg_assistant_${randomUUID()}`,
  echo: `call_echo_${randomUUID()}`,
  wait: `call_wait_${randomUUID()}`,
  frontend: `call_front_${randomUUID()}`,
  frontendAnswer: `msg_tool_${randomUUID()}`,
  secondRun: `${runId}-answer`,
};

// A tool of the application itself: toolgate must leave calls to it alone.
const frontendTool = {
  name: "show_confirmation",
  description: "Ask the person to confirm something in the UI.",
  parameters: {
    type: "object",
    properties: { question: { type: "string" } },
    required: ["question"],
  },
};

const agent = new HttpAgent({
  url: `${args.base}/v1/threads/${encodeURIComponent(thread)}/runs`,
  headers: { Authorization: `Bearer ${args.token}` },
  threadId: thread,
});

agent.setMessages([
  { id: ids.user, role: "user", content: "Echo hi, wait a little, then ask me." },
  // The model's reasoning, as the client holds and sends it: taken, and
  // left out of the thread.
  { id: ids.reasoning, role: "reasoning", content: "Echo first, then wait, then ask." },
  {
    id: ids.assistant,
    role: "assistant",
    toolCalls: [
      {
        id: ids.echo,
        type: "function",
        function: { name: "echo", arguments: JSON.stringify({ text: "hi" }) },
      },
      {
        id: ids.wait,
        type: "function",
        function: { name: "wait", arguments: JSON.stringify({ ms: 50 }) },
      },
      {
        id: ids.frontend,
        type: "function",
        function: {
          name: frontendTool.name,
          arguments: JSON.stringify({ question: "Done?" }),
        },
      },
    ],
  },
]);

/** One runAgent call with a subscriber that records everything it sees. */
async function runOnce(runId) {
  const seen = { events: [], finishedParams: null, runError: null };
  const result = await agent.runAgent(
    { runId, tools: [frontendTool] },
    {
      onEvent: ({ event }) => {
        seen.events.push(structuredClone(event));
      },
      onRunFinishedEvent: (params) => {
        seen.finishedParams = {
          outcome: params.outcome,
          pendingToolCallIds: params.pendingToolCallIds,
          result: params.result,
        };
      },
      onRunErrorEvent: ({ event }) => {
        seen.runError = structuredClone(event);
      },
    },
  );
  const events = seen.events;
  return {
    types: events.map((e) => e.type),
    events,
    toolCallResults: events
      .filter((e) => e.type === "TOOL_CALL_RESULT")
      .map((e) => ({
        toolCallId: e.toolCallId,
        messageId: e.messageId,
        content: e.content,
        metadata: e.metadata,
      })),
    runFinished: events.find((e) => e.type === "RUN_FINISHED") ?? null,
    runError: seen.runError,
    finishedParams: seen.finishedParams,
    messages: structuredClone(agent.messages),
    newMessages: result.newMessages,
  };
}

let stage = "first run";
let first = null;
try {
  first = await runOnce(runId);

  // The application answers its own tool and runs again: nothing is left
  // for toolgate to execute.
  stage = "second run";
  agent.addMessage({
    id: ids.frontendAnswer,
    role: "tool",
    toolCallId: ids.frontend,
    content: JSON.stringify({ confirmed: true }),
  });
  const second = await runOnce(ids.secondRun);

  const report = {
    ids: { ...ids, thread, run: runId },
    ...first,
    second,
    warnings: warnings.list,
  };
  process.stdout.write(JSON.stringify(report) + "\n");

  const problems = [];
  for (const [name, turn] of [["first run", first], ["second run", second]]) {
    if (turn.runError) problems.push(`${name}: RUN_ERROR ${JSON.stringify(turn.runError)}`);
    if (!turn.runFinished) problems.push(`${name}: no RUN_FINISHED event`);
  }
  if (warnings.list.length > 0) {
    problems.push(`the client had to fix events: ${JSON.stringify(warnings.list)}`);
  }
  if (problems.length > 0) {
    console.error(`run.mjs: ${problems.join("; ")}`);
    process.exitCode = 1;
  }
} catch (error) {
  console.error(`run.mjs: HttpAgent.runAgent failed in the ${stage}: ${error?.stack ?? error}`);
  if (first) console.error(`run.mjs: the first run saw: ${JSON.stringify(first.events)}`);
  process.exitCode = 1;
}
