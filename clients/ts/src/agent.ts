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
import { OnDisconnect, type TurnOptionsSchema } from "./gen/general_agent/v1/turn_pb.js";
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

/**
 * One turn (StreamTurn): every event of the turn's run up to and including its first run_finished. Once the run
 * has started, a dropped stream is followed up with WatchSession after the last sequence yielded, so no event is
 * lost or repeated (the run goes on meanwhile only with onDisconnect CONTINUE in the turn's options).
 */
export async function* turn(
  client: AgentClient,
  sessionId: string,
  input: ContentPart[],
  options: { timeoutMs?: number; signal?: AbortSignal; turnOptions?: MessageInitShape<typeof TurnOptionsSchema> } = {},
): AsyncGenerator<SessionEvent> {
  const call = { timeoutMs: options.timeoutMs, signal: options.signal };
  let responses: AsyncIterable<{ event?: SessionEvent }> = client.streamTurn({ sessionId, input, options: options.turnOptions }, call);
  let cursor = 0n;
  let runId = "";
  let lastContact = Date.now();
  for (;;) {
    try {
      for await (const { event } of responses) {
        lastContact = Date.now();
        if (!event || event.sequence <= cursor || (runId && event.runId !== runId)) continue; // replayed, or another run's
        cursor = event.sequence;
        runId = event.runId;
        yield event;
        if (event.event.case === "runFinished") return;
      }
      throw new ConnectError("the stream ended before the run finished", Code.Unavailable);
    } catch (e) {
      if (!runId || !transient(e, options.signal) || Date.now() - lastContact > 60_000) throw e;
      await new Promise((resolve) => setTimeout(resolve, 100));
      responses = client.watchSession({ sessionId, afterSequence: cursor }, call);
    }
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
  /** The turn's idempotency key (default: a random one); the same across reattaches. */
  requestId?: string;
  /** How long to keep reattaching without contact with the server (default 60 s). */
  reconnectTimeoutMs?: number;
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

const TURN = "turn";
// Answers to a call already resolved (by an earlier attach, or another host) are not errors.
const IGNORED_ANSWER_REASONS = new Set(["TOOL_CALL_ALREADY_RESOLVED", "UNKNOWN_TOOL_CALL"]);

/**
 * A dropped connection or a stopping server (reattach), not an answer of the service (throw). Connect's Node
 * transport reports the streams of a lost HTTP/2 connection as a local (not wire) CANCELED.
 */
function transient(e: unknown, signal: AbortSignal | undefined): boolean {
  if (!(e instanceof ConnectError) || signal?.aborted) return false; // a CommandError, the host's own, or an abort
  const details = errorDetails(e);
  if (details.code === Code.Canceled) return !e.isWireError;
  return details.code === Code.Unavailable || ((details.code === Code.Internal || details.code === Code.Unknown) && !details.reason);
}

/** One run() across its attachments. */
class RunState {
  cursor = 0n; // the last sequence yielded
  lastContact = Date.now();
  private runId: string | undefined; // the turn's run, once its command_result arrived
  private finished = false;
  private readonly terminal = new Set<string>();
  private readonly started = new Set<string>();
  private readonly pending = new Map<string, RunSessionRequestInit>(); // answers not acknowledged yet
  private outbox: Outbox | undefined;
  private readonly turn: RunSessionRequestInit;
  private delayMs = 100;

  constructor(
    private readonly client: AgentClient,
    private readonly sessionId: string,
    input: ContentPart[],
    private readonly options: RunOptions,
  ) {
    const requestId = options.requestId ?? crypto.randomUUID();
    this.turn = { command: { case: "turn", value: { commandId: TURN, requestId, input } } };
  }

  /** One RunSession stream: attach after the cursor, resend what is not acknowledged, follow. */
  async *attachment(): AsyncGenerator<SessionEvent> {
    const outbox = new Outbox();
    this.outbox = outbox;
    const attach = { sessionId: this.sessionId, afterSequence: this.cursor, onDisconnect: OnDisconnect.CONTINUE };
    outbox.push({ command: { case: "attach", value: attach } });
    if (this.runId === undefined) outbox.push(this.turn);
    for (const answer of this.pending.values()) outbox.push(answer);
    try {
      for await (const res of this.client.runSession(outbox, { timeoutMs: this.options.timeoutMs, signal: this.options.signal })) {
        this.lastContact = Date.now();
        this.delayMs = 100;
        const response = res.response;
        if (response.case === "commandResult") this.onCommandResult(response.value);
        else if (response.case === "event" && response.value.sequence > this.cursor) {
          const event = response.value;
          this.cursor = event.sequence;
          this.startHandler(event);
          yield event;
          if (isTerminal(event)) this.terminal.add(event.runId);
        }
        if (this.runId !== undefined && this.terminal.has(this.runId)) this.finished = true;
        if (this.finished) outbox.close(); // the server ends the stream after our run
      }
    } finally {
      outbox.close();
      this.outbox = undefined;
    }
    if (!this.finished) throw new ConnectError("RunSession ended before the run finished", Code.Unavailable);
  }

  private onCommandResult(result: { commandId: string; status?: Status; runId: string }): void {
    const refused = statusDetails(result.status);
    if (result.commandId === TURN) {
      if (refused) throw new CommandError(result.commandId, refused);
      this.runId = result.runId;
      return;
    }
    const known = this.pending.delete(result.commandId);
    if (known && refused && !IGNORED_ANSWER_REASONS.has(refused.reason)) throw new CommandError(result.commandId, refused);
  }

  private startHandler(event: SessionEvent): void {
    const body = event.event;
    if (body.case === "hostedToolCall") this.start(`hosted-${body.value.callId}`, (id) => hostedAnswer(body.value, id, this.options));
    if (body.case === "approvalRequested") this.start(`approval-${body.value.callId}`, (id) => approvalAnswer(body.value, id, this.options));
  }

  private start(commandId: string, answer: (commandId: string) => Promise<RunSessionRequestInit>): void {
    if (this.started.has(commandId)) return;
    this.started.add(commandId);
    void answer(commandId).then((request) => {
      this.pending.set(commandId, request);
      this.outbox?.push(request); // else the next attachment sends it
    });
  }

  /** Waits before the next attach: 100 ms, doubling up to 2 s, while the server is unreachable. */
  async backoff(): Promise<void> {
    await new Promise((resolve) => setTimeout(resolve, this.delayMs));
    this.delayMs = Math.min(this.delayMs * 2, 2000);
  }

  /** Cancels the run when run() ends before it did: with on_disconnect CONTINUE it would go on alone. */
  async cancelUnfinished(): Promise<void> {
    if (this.finished || this.runId === undefined) return;
    await this.client.cancelRun({ sessionId: this.sessionId, runId: this.runId }, { timeoutMs: 5000 }).catch(() => undefined);
  }
}

async function hostedAnswer(call: HostedToolCallEvent, commandId: string, options: RunOptions): Promise<RunSessionRequestInit> {
  const handler = options.hosted?.[call.toolName];
  const callId = call.callId;
  try {
    if (!handler) throw new Error(`no handler for hosted tool "${call.toolName}" in this host`);
    const output = await handler(call);
    return { command: { case: "hostedResult", value: { commandId, callId, result: { case: "outputJson", value: JSON.stringify(output) } } } };
  } catch (e) {
    const error = e instanceof Error ? e.message : String(e);
    return { command: { case: "hostedResult", value: { commandId, callId, result: { case: "error", value: error } } } };
  }
}

async function approvalAnswer(asked: ApprovalRequestedEvent, commandId: string, options: RunOptions): Promise<RunSessionRequestInit> {
  let decision: Decision;
  try {
    decision = options.onApproval ? await options.onApproval(asked) : deny("no approval handler in this host");
  } catch (e) {
    decision = deny(e instanceof Error ? e.message : String(e));
  }
  return { command: { case: "resolveApproval", value: { commandId, callId: asked.callId, ...decision } } };
}

/**
 * Drives one turn over RunSession: attaches, starts the turn, answers every hosted call and approval as it
 * arrives, and yields every event of the session from the attach on, each once and in sequence order, until
 * the turn's terminal run_finished. A dropped stream (UNAVAILABLE, or one that ends early) is attached again
 * with after_sequence = the last sequence yielded; the turn (same requestId) and unacknowledged answers are
 * resent. A refused command throws a CommandError; any other stream error throws the ConnectError (decode it
 * with errorDetails). Leaving early (break, or an error) cancels the run.
 */
export async function* run(
  client: AgentClient,
  sessionId: string,
  input: ContentPart[],
  options: RunOptions = {},
): AsyncGenerator<SessionEvent> {
  const state = new RunState(client, sessionId, input, options);
  const { session } = await client.getSession({ sessionId }, { signal: options.signal });
  state.cursor = session?.lastSequence ?? 0n;
  try {
    for (;;) {
      try {
        yield* state.attachment();
        return;
      } catch (e) {
        if (!transient(e, options.signal) || Date.now() - state.lastContact > (options.reconnectTimeoutMs ?? 60_000)) throw e;
        await state.backoff();
      }
    }
  } finally {
    await state.cancelUnfinished();
  }
}
