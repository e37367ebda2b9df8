// Small helpers shared by run.mjs and stream.mjs.

import { parseArgs as nodeParseArgs } from "node:util";

/** `--name value` options, each falling back to `defaults[name]`. */
export function parseArgs(argv, defaults) {
  const options = Object.fromEntries(
    Object.keys(defaults).map((name) => [name, { type: "string" }]),
  );
  const { values } = nodeParseArgs({ args: argv, options, strict: true });
  const out = { ...defaults };
  for (const [k, v] of Object.entries(values)) {
    if (v !== undefined) out[k] = v;
  }
  return out;
}

/**
 * Records every console.warn (the AG-UI client warns whenever it strips an
 * unknown field or translates a retired shape) and still shows it on stderr.
 */
export function captureWarnings() {
  const list = [];
  const original = console.warn;
  console.warn = (...parts) => {
    list.push(parts.map((p) => (typeof p === "string" ? p : safeJson(p))).join(" "));
    original(...parts);
  };
  return { list };
}

function safeJson(value) {
  try {
    return JSON.stringify(value);
  } catch {
    return String(value);
  }
}
