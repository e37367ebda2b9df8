// Reads toolgate's thread event stream (GET /v1/threads/{thread}/events) for
// a bounded time and checks every event against @ag-ui/core's own schemas,
// then runs the whole sequence through @ag-ui/client's enforcement and
// verification stages, exactly as an AG-UI client would. Nothing is fixed
// up on the way: an event is taken as toolgate sent it.
//
// Usage:
//   node stream.mjs --base URL --thread THREAD [--after 0|none] [--snapshot true]
//                   [--min-events N] [--idle-ms 1500] [--timeout-ms 5000]
//                   [--snapshot-mark FILE]
// With --snapshot-mark, FILE is created once the MESSAGES_SNAPSHOT arrives
// (a test then knows the snapshot's moment has passed).
// The token comes from $TOOLGATE_TOKEN (or --token).
//
// Stops when at least --min-events events arrived and none came for
// --idle-ms, or at --timeout-ms in any case. Prints ONE JSON line:
//   {count, types, ids, heartbeats, failures, verify, warnings, events,
//    messages}
// where `messages` is the message list the client's own defaultApplyEvents
// builds from the accepted sequence (what a frontend shows).
// and exits 0 only when every event parsed, the client accepted the
// sequence without a warning, and at least --min-events events arrived.

import { defaultApplyEvents, enforceEvents, verifyEvents } from "@ag-ui/client";
import { EventSchemas } from "@ag-ui/core/schemas";
import { from, lastValueFrom, toArray } from "rxjs";

import { writeFileSync } from "node:fs";

import { parseArgs, captureWarnings } from "./lib.mjs";

const args = parseArgs(process.argv.slice(2), {
  base: process.env.TOOLGATE_BASE,
  token: process.env.TOOLGATE_TOKEN,
  thread: process.env.TOOLGATE_THREAD,
  after: "0",
  snapshot: "false",
  "min-events": "1",
  "idle-ms": "1500",
  "timeout-ms": "5000",
  "snapshot-mark": "",
});
for (const required of ["base", "token", "thread"]) {
  if (!args[required]) {
    console.error(`stream.mjs: missing --${required}`);
    process.exit(2);
  }
}
const minEvents = Number(args["min-events"]);
const idleMs = Number(args["idle-ms"]);
const timeoutMs = Number(args["timeout-ms"]);

const warnings = captureWarnings();
const failures = [];
const frames = []; // {id, raw, event}
let heartbeats = 0;
let sawCarriageReturn = false;

// `--after none`: no resume point (a snapshot, then only new events).
const query = new URLSearchParams(args.after === "none" ? {} : { after: args.after });
if (args.snapshot === "true") query.set("snapshot", "true");
const url = `${args.base}/v1/threads/${encodeURIComponent(args.thread)}/events?${query}`;

const abort = new AbortController();
const hardStop = setTimeout(() => abort.abort(new Error("timeout")), timeoutMs);
let idleTimer = null;
const armIdle = () => {
  clearTimeout(idleTimer);
  if (frames.length >= minEvents) {
    idleTimer = setTimeout(() => abort.abort(new Error("idle")), idleMs);
  }
};

/** One SSE block (text between blank lines), per the SSE spec's field rules. */
function handleBlock(block) {
  let id;
  const data = [];
  let comment = false;
  for (const line of block.split("\n")) {
    if (line === "") continue;
    if (line.startsWith(":")) {
      comment = true;
      continue;
    }
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") data.push(value);
    else if (field === "id") id = value;
    else failures.push({ kind: "sse-field", detail: `unexpected SSE field ${JSON.stringify(line)}` });
  }
  if (data.length === 0) {
    if (comment) heartbeats += 1;
    return;
  }
  const raw = data.join("\n");
  const index = frames.length;
  let event;
  try {
    event = JSON.parse(raw);
  } catch (error) {
    failures.push({ kind: "json", index, id, raw, detail: String(error) });
    frames.push({ id, raw, event: null });
    return;
  }
  const parsed = EventSchemas.safeParse(event);
  if (!parsed.success) {
    failures.push({
      kind: "schema",
      index,
      id,
      type: event?.type,
      raw,
      issues: parsed.error.issues,
    });
  }
  frames.push({ id, raw, event });
  if (event?.type === "MESSAGES_SNAPSHOT" && args["snapshot-mark"]) {
    writeFileSync(args["snapshot-mark"], "");
  }
  armIdle();
}

let stoppedBy = "end-of-stream";
try {
  const response = await fetch(url, {
    headers: { Authorization: `Bearer ${args.token}`, Accept: "text/event-stream" },
    signal: abort.signal,
  });
  if (response.status !== 200) {
    throw new Error(`GET ${url} answered ${response.status}: ${await response.text()}`);
  }
  const contentType = response.headers.get("content-type");
  if (contentType !== "text/event-stream") {
    failures.push({ kind: "content-type", detail: `content-type ${contentType}` });
  }
  armIdle();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for await (const chunk of response.body) {
      const text = decoder.decode(chunk, { stream: true });
      if (text.includes("\r")) sawCarriageReturn = true;
      buffer += text;
      let cut;
      while ((cut = buffer.indexOf("\n\n")) !== -1) {
        handleBlock(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 2);
      }
    }
  } catch (error) {
    if (!abort.signal.aborted) throw error;
    stoppedBy = abort.signal.reason?.message ?? "aborted";
  }
} catch (error) {
  console.error(`stream.mjs: ${error?.stack ?? error}`);
  process.exitCode = 1;
} finally {
  clearTimeout(hardStop);
  clearTimeout(idleTimer);
}

if (sawCarriageReturn) {
  failures.push({ kind: "framing", detail: "the stream contains CR; AG-UI framing here is LF only" });
}

// The sequence as @ag-ui/client's pipeline sees it: enforcement (schema
// validation, unknown material stripped with a warning) then verification
// (RUN_STARTED first, tool calls opened before args, …).
const verify = { ok: true, error: null, accepted: 0 };
let accepted = [];
try {
  accepted = await lastValueFrom(
    from(frames.filter((f) => f.event !== null).map((f) => structuredClone(f.event))).pipe(
      enforceEvents(),
      verifyEvents(),
      toArray(),
    ),
    { defaultValue: [] },
  );
  verify.accepted = accepted.length;
} catch (error) {
  verify.ok = false;
  verify.error = String(error?.message ?? error);
}

// The messages the client builds from what it accepted, as an agent's
// `messages` would hold them after the stream.
let messages = [];
try {
  const input = {
    threadId: args.thread,
    runId: "stream",
    messages: [],
    state: {},
    tools: [],
    context: [],
    forwardedProps: {},
  };
  const mutations = await lastValueFrom(
    defaultApplyEvents(input, from(accepted), { messages: [], state: {} }, []).pipe(toArray()),
    { defaultValue: [] },
  );
  for (const mutation of mutations) {
    if (mutation.messages !== undefined) messages = mutation.messages;
  }
} catch (error) {
  failures.push({ kind: "apply", detail: String(error?.message ?? error) });
}

const report = {
  count: frames.length,
  types: frames.map((f) => f.event?.type ?? null),
  ids: frames.map((f) => (f.id === undefined ? null : f.id)),
  heartbeats,
  stoppedBy,
  failures,
  verify,
  warnings: warnings.list,
  events: frames.map((f) => f.event),
  messages,
};
process.stdout.write(JSON.stringify(report) + "\n");

const problems = [];
if (failures.length > 0) problems.push(`${failures.length} event(s) failed validation`);
if (!verify.ok) problems.push(`the client rejected the sequence: ${verify.error}`);
if (warnings.list.length > 0) problems.push("the client had to fix events (see warnings)");
if (frames.length < minEvents) problems.push(`only ${frames.length} of ${minEvents} events arrived`);
if (problems.length > 0) {
  console.error(`stream.mjs: ${problems.join("; ")}`);
  process.exitCode = 1;
}
