// Smoke check of the General Agent Service through the generated TypeScript
// client (protoc-gen-es v2 + Connect's gRPC transport over HTTP/2 plaintext):
// creates a session, streams one turn and prints the assistant text and the
// run outcome.
//
// Usage: npx tsx src/smoke.ts --addr host:port [--prompt text]
//
// Output (stdout):
//   session <id>
//   text: <concatenated assistant_delta text>
//   outcome: <RunOutcome enum name, e.g. RUN_OUTCOME_COMPLETED>
//
// Exit codes: 0 on success, 1 on any RPC error (code and message on stderr),
// 2 when the stream ends without a run_finished event, 64 on bad usage.

import { parseArgs } from "node:util";
import { create } from "@bufbuild/protobuf";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { AgentService } from "./gen/general_agent/v1/agent_service_pb.js";
import { ContentPartSchema } from "./gen/general_agent/v1/content_pb.js";
import { RunOutcome, RunOutcomeSchema, type RunFinishedEvent } from "./gen/general_agent/v1/event_pb.js";
import { CreateSessionRequestSchema } from "./gen/general_agent/v1/session_messages_pb.js";
import { SessionMode } from "./gen/general_agent/v1/session_pb.js";
import { StreamTurnRequestSchema } from "./gen/general_agent/v1/turn_pb.js";

const OVERALL_TIMEOUT_MS = 30_000;

function usage(msg: string): never {
  process.stderr.write(`smoke: ${msg}\nusage: smoke --addr host:port [--prompt text]\n`);
  process.exit(64);
}

/** The proto name of a RunOutcome value (e.g. RUN_OUTCOME_COMPLETED), same as Go's String(). */
function outcomeName(n: RunOutcome): string {
  // RunOutcome[n] would give the prefix-stripped TS name ("COMPLETED"); the
  // enum's descriptor carries the name as declared in the .proto.
  return RunOutcomeSchema.value[n]?.name ?? RunOutcome[n] ?? String(n);
}

/** The `reason` of a google.rpc.ErrorInfo in the error details, if any. */
function errorInfoReason(err: ConnectError): string | undefined {
  for (const d of err.details) {
    if (!("type" in d) || d.type !== "google.rpc.ErrorInfo") continue;
    // ErrorInfo is not part of the generated code; field 1 is `string reason`.
    const r = new BinaryReader(d.value);
    while (r.pos < r.len) {
      const [field, wireType] = r.tag();
      if (field === 1 && wireType === WireType.LengthDelimited) return r.string();
      r.skip(wireType);
    }
  }
  return undefined;
}

function reportError(rpc: string, e: unknown): number {
  const err = ConnectError.from(e);
  let line = `smoke: ${rpc} failed: code=${Code[err.code]} message=${JSON.stringify(err.rawMessage)}`;
  try {
    const reason = errorInfoReason(err);
    if (reason) line += ` reason=${reason}`;
  } catch {
    // Malformed details: report code and message only.
  }
  process.stderr.write(line + "\n");
  return 1;
}

async function main(): Promise<number> {
  let values: { addr?: string; prompt?: string };
  try {
    ({ values } = parseArgs({
      options: {
        addr: { type: "string" },
        prompt: { type: "string", default: "Say hello" },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (e) {
    usage(e instanceof Error ? e.message : String(e));
  }
  const addr = values.addr;
  if (!addr) usage("--addr host:port is required");
  const prompt = values.prompt ?? "Say hello";

  const transport = createGrpcTransport({ baseUrl: "http://" + addr });
  const client = createClient(AgentService, transport);
  // One overall deadline; each call gets the time left (sent as grpc-timeout,
  // surfacing as DeadlineExceeded like the Go program's context deadline).
  const deadline = Date.now() + OVERALL_TIMEOUT_MS;
  const timeoutMs = () => Math.max(1, deadline - Date.now());

  let sessionId: string;
  try {
    const created = await client.createSession(
      create(CreateSessionRequestSchema, {
        session: {
          identity: { mode: SessionMode.GENERAL, sessionKey: "ts-smoke" },
        },
      }),
      { timeoutMs: timeoutMs() },
    );
    sessionId = created.session?.identity?.sessionId ?? "";
  } catch (e) {
    return reportError("CreateSession", e);
  }
  process.stdout.write(`session ${sessionId}\n`);

  let text = "";
  let finished: RunFinishedEvent | undefined;
  try {
    const stream = client.streamTurn(
      create(StreamTurnRequestSchema, {
        sessionId,
        input: [create(ContentPartSchema, { part: { case: "text", value: { text: prompt } } })],
      }),
      { timeoutMs: timeoutMs() },
    );
    for await (const res of stream) {
      const ev = res.event?.event;
      if (ev?.case === "assistantDelta") {
        text += ev.value.text;
      } else if (ev?.case === "runFinished") {
        finished = ev.value;
        break; // the server ends the stream right after run_finished
      }
      // Other (and unknown future) event variants are skipped.
    }
  } catch (e) {
    return reportError("StreamTurn", e);
  }

  process.stdout.write(`text: ${text}\n`);
  if (!finished) {
    process.stderr.write("smoke: stream ended without run_finished\n");
    return 2;
  }
  process.stdout.write(`outcome: ${outcomeName(finished.outcome)}\n`);
  return 0;
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`smoke: unexpected error: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exit(1);
  },
);
