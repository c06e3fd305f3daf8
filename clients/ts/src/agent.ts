// A small hand-written layer over the generated TypeScript client (src/gen):
// a turn iterator, a RunSession loop that runs hosted-tool handlers and
// answers approvals, and error helpers that read google.rpc.ErrorInfo,
// BadRequest and RetryInfo through the generated error_details types.

import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { AgentService } from "./gen/general_agent/v1/agent_service_pb.js";
import { ApprovalDecision } from "./gen/general_agent/v1/approval_pb.js";
import { ContentPartSchema, type ContentPart } from "./gen/general_agent/v1/content_pb.js";
import {
  RunOutcome,
  type ApprovalRequestedEvent,
  type HostedToolCallEvent,
  type SessionEvent,
} from "./gen/general_agent/v1/event_pb.js";
import type { RunSessionRequestSchema } from "./gen/general_agent/v1/run_session_pb.js";
import { BadRequestSchema, ErrorInfoSchema, RetryInfoSchema } from "./gen/google/rpc/error_details_pb.js";
import type { Status } from "./gen/google/rpc/status_pb.js";

export type AgentClient = Client<typeof AgentService>;

/** A client for `host:port` over plaintext HTTP/2 (Connect's gRPC transport). */
export function connect(address: string): AgentClient {
  return createClient(AgentService, createGrpcTransport({ baseUrl: "http://" + address }));
}

/** A text part of a user message. */
export function text(value: string): ContentPart {
  return create(ContentPartSchema, { part: { case: "text", value: { text: value } } });
}

/** True for a run_finished that ends its run (not SUSPENDED). */
export function isTerminal(event: SessionEvent): boolean {
  return event.event.case === "runFinished" && event.event.value.outcome !== RunOutcome.SUSPENDED;
}

/** One turn (StreamTurn): every event up to and including the first run_finished. */
export async function* turn(
  client: AgentClient,
  sessionId: string,
  input: ContentPart[],
  options: { timeoutMs?: number; signal?: AbortSignal } = {},
): AsyncGenerator<SessionEvent> {
  for await (const res of client.streamTurn({ sessionId, input }, options)) {
    if (!res.event) continue;
    yield res.event;
    if (res.event.event.case === "runFinished") return;
  }
}

// ------------------------------------------------------------------ errors

export interface FieldViolation {
  field: string;
  description: string;
  reason: string;
}

/** An error of the service, decoded. */
export interface ErrorDetails {
  code: Code;
  message: string;
  /** The ErrorInfo reason, e.g. "SESSION_BUSY"; "" without ErrorInfo. */
  reason: string;
  domain: string;
  metadata: Record<string, string>;
  fieldViolations: FieldViolation[];
  /** The RetryInfo delay in milliseconds, when sent. */
  retryDelayMs?: number;
}

/** Decodes any error thrown by a call (ConnectError.from for anything else). */
export function errorDetails(e: unknown): ErrorDetails {
  const err = ConnectError.from(e);
  const info = err.findDetails(ErrorInfoSchema)[0];
  const bad = err.findDetails(BadRequestSchema);
  const retry = err.findDetails(RetryInfoSchema)[0];
  return details(err.code, err.rawMessage, info, bad, retry);
}

/** Decodes a google.rpc.Status message (a command_result's status, run_finished.error); undefined for OK. */
export function statusDetails(status: Status | undefined): ErrorDetails | undefined {
  if (!status || status.code === 0) return undefined;
  const unpack = <T extends Parameters<typeof anyUnpack>[1]>(schema: T) =>
    status.details.flatMap((d) => {
      const m = anyUnpack(d, schema);
      return m ? [m] : [];
    });
  return details(
    status.code as Code,
    status.message,
    unpack(ErrorInfoSchema)[0],
    unpack(BadRequestSchema),
    unpack(RetryInfoSchema)[0],
  );
}

function details(
  code: Code,
  message: string,
  info: { reason: string; domain: string; metadata: Record<string, string> } | undefined,
  bad: { fieldViolations: FieldViolation[] }[],
  retry: { retryDelay?: { seconds: bigint; nanos: number } } | undefined,
): ErrorDetails {
  const out: ErrorDetails = {
    code,
    message,
    reason: info?.reason ?? "",
    domain: info?.domain ?? "",
    metadata: { ...(info?.metadata ?? {}) },
    fieldViolations: bad.flatMap((b) =>
      b.fieldViolations.map((v) => ({ field: v.field, description: v.description, reason: v.reason })),
    ),
  };
  if (retry?.retryDelay) out.retryDelayMs = Number(retry.retryDelay.seconds) * 1000 + retry.retryDelay.nanos / 1e6;
  return out;
}

/** A RunSession command the server refused. */
export class CommandError extends Error {
  constructor(
    readonly commandId: string,
    readonly details: ErrorDetails,
  ) {
    super(`command ${commandId}: ${Code[details.code]}: ${details.message}${details.reason ? ` (${details.reason})` : ""}`);
  }
}

// ------------------------------------------------------------------ RunSession

/** Runs one hosted call; a string is the tool text, anything else its JSON; a throw is an error result. */
export type HostedHandler = (call: HostedToolCallEvent) => unknown | Promise<unknown>;

export interface Decision {
  decision: ApprovalDecision;
  editedInputJson?: string;
  message?: string;
}
export const approve = (): Decision => ({ decision: ApprovalDecision.APPROVE });
export const approveAlways = (): Decision => ({ decision: ApprovalDecision.APPROVE_ALWAYS });
export const deny = (message = ""): Decision => ({ decision: ApprovalDecision.DENY, message });

export interface RunOptions {
  /** Hosted tool handlers by name; a call with no handler gets an error result. */
  hosted?: Record<string, HostedHandler>;
  /** Answers approvals; without it every request is denied (fail-closed). */
  onApproval?: (request: ApprovalRequestedEvent) => Decision | Promise<Decision>;
  timeoutMs?: number;
  signal?: AbortSignal;
}

type RunSessionRequestInit = MessageInitShape<typeof RunSessionRequestSchema>;

/** The requests of a bidi stream: pushed by the loop and the handlers, pulled by the transport. */
class Outbox implements AsyncIterable<RunSessionRequestInit> {
  private readonly queued: RunSessionRequestInit[] = [];
  private wake: (() => void) | undefined;
  private closed = false;

  push(request: RunSessionRequestInit): void {
    if (this.closed) return;
    this.queued.push(request);
    this.wake?.();
  }

  close(): void {
    this.closed = true;
    this.wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<RunSessionRequestInit> {
    for (;;) {
      const next = this.queued.shift();
      if (next !== undefined) yield next;
      else if (this.closed) return;
      else {
        await new Promise<void>((resolve) => (this.wake = resolve));
        this.wake = undefined;
      }
    }
  }
}

/**
 * Drives one turn over RunSession: attaches, starts the turn, answers every hosted call and approval as it
 * arrives, and yields every event until the turn's terminal run_finished. A refused command throws a
 * CommandError; a stream error throws the ConnectError (decode it with errorDetails).
 */
export async function* run(
  client: AgentClient,
  sessionId: string,
  input: ContentPart[],
  options: RunOptions = {},
): AsyncGenerator<SessionEvent> {
  const outbox = new Outbox();
  outbox.push({ command: { case: "attach", value: { sessionId } } });
  outbox.push({ command: { case: "turn", value: { commandId: "turn", input } } });
  const answered = new Set<string>();
  const finished = new Set<string>();
  let runId: string | undefined;
  let commands = 0;
  const hostedAnswer = async (call: HostedToolCallEvent, id: string) => {
    const handler = options.hosted?.[call.toolName];
    let result: RunSessionRequestInit;
    try {
      if (!handler) throw new Error(`no handler for hosted tool "${call.toolName}" in this host`);
      const output = await handler(call);
      result = {
        command: {
          case: "hostedResult",
          value: { commandId: id, callId: call.callId, result: { case: "outputJson", value: JSON.stringify(output) } },
        },
      };
    } catch (e) {
      const error = e instanceof Error ? e.message : String(e);
      result = { command: { case: "hostedResult", value: { commandId: id, callId: call.callId, result: { case: "error", value: error } } } };
    }
    outbox.push(result);
  };
  const approvalAnswer = async (asked: ApprovalRequestedEvent, id: string) => {
    let decision: Decision;
    try {
      decision = options.onApproval ? await options.onApproval(asked) : deny("no approval handler in this host");
    } catch (e) {
      decision = deny(e instanceof Error ? e.message : String(e));
    }
    outbox.push({ command: { case: "resolveApproval", value: { commandId: id, callId: asked.callId, ...decision } } });
  };
  try {
    for await (const res of client.runSession(outbox, { timeoutMs: options.timeoutMs, signal: options.signal })) {
      const response = res.response;
      if (response.case === "commandResult") {
        const refused = statusDetails(response.value.status);
        if (refused) throw new CommandError(response.value.commandId, refused);
        if (response.value.commandId === "turn") {
          runId = response.value.runId;
          if (finished.has(runId)) outbox.close();
        }
        continue;
      }
      if (response.case !== "event") continue;
      const event = response.value;
      const body = event.event;
      if (body.case === "hostedToolCall" && !answered.has(body.value.callId)) {
        answered.add(body.value.callId);
        void hostedAnswer(body.value, `hosted-${++commands}`);
      } else if (body.case === "approvalRequested" && !answered.has("approval:" + body.value.callId)) {
        answered.add("approval:" + body.value.callId);
        void approvalAnswer(body.value, `approval-${++commands}`);
      }
      yield event;
      if (isTerminal(event)) {
        finished.add(event.runId);
        if (event.runId === runId) outbox.close(); // the server ends the stream after our run
      }
    }
  } finally {
    outbox.close();
  }
}
