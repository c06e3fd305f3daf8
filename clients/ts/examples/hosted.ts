// An example host built on src/agent.ts: a coding session whose `write` calls
// need approval and which declares the hosted tool `lookup`; one turn driven by
// run() (approving every request, answering lookups); then the error helpers on
// a session that does not exist.
//
//   npx tsx examples/hosted.ts --addr 127.0.0.1:50051 --prompt "Look up TypeScript, then write notes.txt"

import { parseArgs } from "node:util";
import { Code } from "@connectrpc/connect";
import { approve, connect, errorDetails, run, text } from "../src/agent.js";
import { RunOutcome, RunOutcomeSchema } from "../src/gen/general_agent/v1/event_pb.js";
import { SessionMode } from "../src/gen/general_agent/v1/session_pb.js";

const { values } = parseArgs({
  options: {
    addr: { type: "string", default: "127.0.0.1:50051" },
    prompt: { type: "string", default: "Look up TypeScript, then write notes.txt" },
  },
});
const client = connect(values.addr ?? "127.0.0.1:50051");

const { session } = await client.createSession({
  session: {
    identity: { mode: SessionMode.CODING },
    approvalPolicy: { entries: ["write"] },
    hostedTools: [
      {
        name: "lookup",
        description: "Looks a word up in the host's dictionary.",
        inputSchemaJson: '{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}',
      },
    ],
  },
});
const sessionId = session?.identity?.sessionId ?? "";
console.log(`session ${sessionId}`);

let answer = "";
let outcome = RunOutcome.UNSPECIFIED;
for await (const event of run(client, sessionId, [text(values.prompt ?? "")], {
  hosted: {
    lookup: (call) => {
      const { q } = JSON.parse(call.inputJson) as { q: string };
      console.log(`hosted: lookup ${q}`);
      return { word: q, meaning: "a programming language" };
    },
  },
  onApproval: (request) => {
    console.log(`approval: ${request.title} ${request.inputJson}`);
    return approve();
  },
  timeoutMs: 60_000,
})) {
  const body = event.event;
  if (body.case === "assistantDelta") answer += body.value.text;
  else if (body.case === "toolResult") console.log(`tool_result: ${body.value.toolName}`);
  else if (body.case === "toolError") console.log(`tool_error: ${body.value.toolName}: ${body.value.error}`);
  else if (body.case === "runFinished") outcome = body.value.outcome;
}
console.log(`text: ${answer}`);
console.log(`outcome: ${RunOutcomeSchema.value[outcome]?.name}`);

try {
  await client.getSession({ sessionId: "no-such-session" });
} catch (e) {
  const err = errorDetails(e);
  console.log(`error: ${Code[err.code]} ${err.reason}`);
}
process.exit(outcome === RunOutcome.COMPLETED ? 0 : 1);
