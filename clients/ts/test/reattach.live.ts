// Run against a live server by tests/e2e/test_ts_client.py, whose fake model calls the hosted `lookup`, then
// answers "done", and then streams "one two three four five six" slowly: npx tsx test/reattach.live.ts <address>
//
// The hosted handler cuts the connection (a loopback TCP proxy) before it returns, so its answer goes out on a
// dead stream: run() must reattach after the last sequence it yielded, resend the answer, and yield every
// later event once. Then a turn() whose connection is cut at its first delta must follow the run up with
// WatchSession. Exits 0 and prints "ok" when, both times, every event of the session came once, in order.

import * as net from "node:net";
import { connect, isTerminal, run, text, turn } from "../src/agent.js";
import { RunOutcome } from "../src/gen/general_agent/v1/event_pb.js";
import { OnDisconnect } from "../src/gen/general_agent/v1/turn_pb.js";

/** A TCP proxy to `upstream` whose connections cut() closes, as a network failure would; it keeps accepting. */
class Proxy {
  readonly sockets = new Set<net.Socket>();
  accepted = 0;
  private readonly server: net.Server;

  constructor(upstream: string) {
    const [host, port] = upstream.split(":");
    this.server = net.createServer((client) => {
      this.accepted++;
      const server = net.connect(Number(port), host);
      for (const socket of [client, server]) {
        this.sockets.add(socket);
        socket.on("error", () => socket.destroy());
        socket.on("close", () => this.sockets.delete(socket));
      }
      client.pipe(server).pipe(client);
    });
  }

  async listen(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    return `127.0.0.1:${(this.server.address() as net.AddressInfo).port}`;
  }

  cut(): void {
    for (const socket of this.sockets) socket.destroy();
  }

  close(): void {
    this.cut();
    this.server.close();
  }
}

function fail(message: string): never {
  console.error(message);
  process.exit(1);
}

const upstream = process.argv[2] ?? fail("usage: reattach.live.ts <server address>");
const proxy = new Proxy(upstream);
const client = connect(await proxy.listen());
const { session } = await client.createSession({
  session: { hostedTools: [{ name: "lookup", inputSchemaJson: '{"type":"object"}' }] },
});
const sessionId = session?.identity?.sessionId ?? "";
const hosted = {
  lookup: () => {
    proxy.cut();
    return { meaning: "found" };
  },
};

const sequences: bigint[] = [];
let reply = "";
let outcome = "";
for await (const event of run(client, sessionId, [text("look it up")], { hosted })) {
  sequences.push(event.sequence);
  if (event.event.case === "assistantDelta") reply += event.event.value.text;
  if (event.event.case === "runFinished" && isTerminal(event)) outcome = RunOutcome[event.event.value.outcome] ?? "";
}

/** The client connected again (at least `connections` connections in all); the sequences are 1..N. */
function checkReattached(sequences: bigint[], connections: number): void {
  if (proxy.accepted < connections) fail(`the client never reconnected (${proxy.accepted} connections)`);
  sequences.forEach((sequence, i) => {
    if (sequence !== BigInt(i + 1)) fail(`sequences ${sequences.join(",")}: want 1..${sequences.length}, no gap or repeat`);
  });
}

checkReattached(sequences, 2);
if (outcome !== "COMPLETED" || reply !== "done") fail(`outcome ${outcome}, reply ${JSON.stringify(reply)}`);
const after = await client.getSession({ sessionId });
if (after.session?.lastSequence !== sequences.at(-1)) fail(`the session went on to ${after.session?.lastSequence}`);

// turn(): cut at the first delta of a slowly streamed reply.
const second = (await client.createSession({ session: {} })).session?.identity?.sessionId ?? "";
const turnOptions = { onDisconnect: OnDisconnect.CONTINUE };
const turnSequences: bigint[] = [];
const connectionsBefore = proxy.accepted;
let counted = "";
for await (const event of turn(client, second, [text("count")], { turnOptions })) {
  if (event.event.case === "assistantDelta") {
    if (!counted) proxy.cut();
    counted += event.event.value.text;
  }
  turnSequences.push(event.sequence);
}
checkReattached(turnSequences, connectionsBefore + 1);
if (counted !== "one two three four five six") fail(`turn text ${JSON.stringify(counted)}`);
proxy.close();
console.log("ok");
