// Smoke check of the General Agent Service through the generated TypeScript
// client (protoc-gen-es v2 + Connect's gRPC transport over HTTP/2 plaintext):
// creates a session, streams one turn and prints the assistant text and the
// run outcome.
//
// Usage: npx tsx src/smoke.ts --addr host:port [--prompt text]
//          [--mode general|coding] [--approve entries] [--hosted name]
//
// With --approve (comma-separated approval_policy entries) or --hosted (a
// hosted tool to declare), the turn runs over RunSession instead of
// StreamTurn, and the program answers every approval_requested with APPROVE
// (a resolve_approval command) and every hosted_tool_call with the JSON output
// {"answered_by":"ts-smoke","tool":<name>,"input":<input>} (a hosted_result
// command), until the run's terminal run_finished.
//
// Output (stdout):
//   session <id>
//   approval: <tool> <call_id> <title>     (RunSession mode, once per request)
//   hosted: <tool> <call_id> <input_json>  (RunSession mode, once per call)
//   text: <concatenated assistant_delta text>
//   outcome: <RunOutcome enum name, e.g. RUN_OUTCOME_COMPLETED>
//
// Exit codes: 0 on success, 1 on any RPC error or refused command (code and
// message on stderr), 2 when the stream ends without a (terminal)
// run_finished event, 64 on bad usage.

import { parseArgs } from "node:util";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { errorDetails } from "./agent.js";
import { AgentService } from "./gen/general_agent/v1/agent_service_pb.js";
import { ContentPartSchema } from "./gen/general_agent/v1/content_pb.js";
import { ApprovalDecision } from "./gen/general_agent/v1/approval_pb.js";
import { RunOutcome, RunOutcomeSchema, type RunFinishedEvent } from "./gen/general_agent/v1/event_pb.js";
import type { RunSessionRequestSchema } from "./gen/general_agent/v1/run_session_pb.js";
import { CreateSessionRequestSchema } from "./gen/general_agent/v1/session_messages_pb.js";
import { SessionMode, type SessionSchema } from "./gen/general_agent/v1/session_pb.js";
import { StreamTurnRequestSchema } from "./gen/general_agent/v1/turn_pb.js";

const OVERALL_TIMEOUT_MS = 30_000;

function usage(msg: string): never {
  process.stderr.write(
    `smoke: ${msg}\nusage: smoke --addr host:port [--prompt text] [--mode general|coding] [--approve entries] [--hosted name]\n`,
  );
  process.exit(64);
}

/** The proto name of a RunOutcome value (e.g. RUN_OUTCOME_COMPLETED), same as Go's String(). */
function outcomeName(n: RunOutcome): string {
  // RunOutcome[n] would give the prefix-stripped TS name ("COMPLETED"); the
  // enum's descriptor carries the name as declared in the .proto.
  return RunOutcomeSchema.value[n]?.name ?? RunOutcome[n] ?? String(n);
}

function reportError(rpc: string, e: unknown): number {
  const err = ConnectError.from(e);
  let line = `smoke: ${rpc} failed: code=${Code[err.code]} message=${JSON.stringify(err.rawMessage)}`;
  try {
    const { reason } = errorDetails(err);
    if (reason) line += ` reason=${reason}`;
  } catch {
    // Malformed details: report code and message only.
  }
  process.stderr.write(line + "\n");
  return 1;
}

type RunSessionRequestInit = MessageInitShape<typeof RunSessionRequestSchema>;

/** The requests of a bidi stream: pushed by the response loop, pulled by the transport. */
class Outbox implements AsyncIterable<RunSessionRequestInit> {
  private readonly queued: RunSessionRequestInit[] = [];
  private wake: (() => void) | undefined;
  private closed = false;

  push(request: RunSessionRequestInit): void {
    this.queued.push(request);
    this.wake?.();
  }

  /** Half-close: the server ends the stream once the runs this stream started are finished. */
  close(): void {
    this.closed = true;
    this.wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<RunSessionRequestInit> {
    for (;;) {
      const next = this.queued.shift();
      if (next !== undefined) {
        yield next;
      } else if (this.closed) {
        return;
      } else {
        await new Promise<void>((resolve) => (this.wake = resolve));
        this.wake = undefined;
      }
    }
  }
}

/** One turn over RunSession, answering approvals (APPROVE) and hosted calls as they arrive. */
async function runSession(
  client: ReturnType<typeof createClient<typeof AgentService>>,
  sessionId: string,
  input: MessageInitShape<typeof ContentPartSchema>[],
  timeoutMs: number,
): Promise<number> {
  const outbox = new Outbox();
  outbox.push({ command: { case: "attach", value: { sessionId } } });
  outbox.push({ command: { case: "turn", value: { commandId: "turn", input } } });
  let text = "";
  let finished: RunFinishedEvent | undefined;
  let commands = 0;
  try {
    for await (const res of client.runSession(outbox, { timeoutMs })) {
      const response = res.response;
      if (response.case === "commandResult") {
        const status = response.value.status;
        if (status && status.code !== 0) {
          outbox.close();
          return reportError(
            `RunSession command ${response.value.commandId}`,
            new ConnectError(status.message, status.code as Code),
          );
        }
        continue;
      }
      if (response.case !== "event") continue; // heartbeats and unknown future responses
      const ev = response.value.event;
      switch (ev.case) {
        case "assistantDelta":
          text += ev.value.text;
          break;
        case "approvalRequested": {
          const asked = ev.value;
          process.stdout.write(`approval: ${asked.toolName} ${asked.callId} ${asked.title}\n`);
          commands++;
          outbox.push({
            command: {
              case: "resolveApproval",
              value: { commandId: `approve-${commands}`, callId: asked.callId, decision: ApprovalDecision.APPROVE },
            },
          });
          break;
        }
        case "hostedToolCall": {
          const call = ev.value;
          process.stdout.write(`hosted: ${call.toolName} ${call.callId} ${call.inputJson}\n`);
          const output = JSON.stringify({ answered_by: "ts-smoke", tool: call.toolName, input: JSON.parse(call.inputJson) });
          commands++;
          outbox.push({
            command: {
              case: "hostedResult",
              value: { commandId: `hosted-${commands}`, callId: call.callId, result: { case: "outputJson", value: output } },
            },
          });
          break;
        }
        case "runFinished":
          if (ev.value.outcome !== RunOutcome.SUSPENDED && finished === undefined) {
            finished = ev.value;
            outbox.close(); // keep reading: the server ends the stream after our run
          }
          break;
        default:
        // Other (and unknown future) event variants are skipped.
      }
    }
  } catch (e) {
    outbox.close();
    return reportError("RunSession", e);
  }

  process.stdout.write(`text: ${text}\n`);
  if (!finished) {
    process.stderr.write("smoke: stream ended without a terminal run_finished\n");
    return 2;
  }
  process.stdout.write(`outcome: ${outcomeName(finished.outcome)}\n`);
  return 0;
}

async function main(): Promise<number> {
  let values: { addr?: string; prompt?: string; mode?: string; approve?: string; hosted?: string };
  try {
    ({ values } = parseArgs({
      options: {
        addr: { type: "string" },
        prompt: { type: "string", default: "Say hello" },
        mode: { type: "string", default: "general" },
        approve: { type: "string" },
        hosted: { type: "string" },
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
  const modes: Record<string, SessionMode> = { general: SessionMode.GENERAL, coding: SessionMode.CODING };
  const mode = modes[values.mode ?? "general"];
  if (mode === undefined) usage(`--mode must be general or coding, not ${JSON.stringify(values.mode)}`);
  const session: MessageInitShape<typeof SessionSchema> = {
    identity: { mode, sessionKey: "ts-smoke" },
  };
  if (values.approve) session.approvalPolicy = { entries: values.approve.split(",") };
  if (values.hosted) {
    session.hostedTools = [
      {
        name: values.hosted,
        description: "Answered by the TypeScript smoke program.",
        inputSchemaJson: '{"type":"object","properties":{"q":{"type":"string"}}}',
      },
    ];
  }

  const transport = createGrpcTransport({ baseUrl: "http://" + addr });
  const client = createClient(AgentService, transport);
  // One overall deadline; each call gets the time left (sent as grpc-timeout,
  // surfacing as DeadlineExceeded like the Go program's context deadline).
  const deadline = Date.now() + OVERALL_TIMEOUT_MS;
  const timeoutMs = () => Math.max(1, deadline - Date.now());

  let sessionId: string;
  try {
    const created = await client.createSession(
      create(CreateSessionRequestSchema, { session }),
      { timeoutMs: timeoutMs() },
    );
    sessionId = created.session?.identity?.sessionId ?? "";
  } catch (e) {
    return reportError("CreateSession", e);
  }
  process.stdout.write(`session ${sessionId}\n`);
  const input = [create(ContentPartSchema, { part: { case: "text", value: { text: prompt } } })];
  if (values.approve || values.hosted) {
    return runSession(client, sessionId, input, timeoutMs());
  }

  let text = "";
  let finished: RunFinishedEvent | undefined;
  try {
    const stream = client.streamTurn(
      create(StreamTurnRequestSchema, {
        sessionId,
        input,
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
