"""The transport floor: what a bare grpc.aio server costs a client for one text turn's stream, with no work behind it.

`python -m bench.transport_floor --responses FILE --ready-file FILE` serves `AgentService.StreamTurn` with no
interceptors and no logic: every call is answered with the responses in FILE (a JSON list of base64-encoded
`StreamTurnResponse`s: those a service text turn sent), parsed once at start and serialised again per call, as
the service serialises its own. It writes {"address", "pid"} to the ready file when it listens.

`turn_fresh` starts it on the service's core and times it from the same client, alternating with the bare SDK's
turns exactly as the service's turns alternate with them, so it sees the same idle time before each call. Its
figures are the part of the service's overhead that any Python gRPC front would add on this machine: the request's
arrival, the responses' sends and their receipt by the client.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc

from bench.common import REPO
from bench.processes import ManagedProcess, start_announcing, without_service_settings
from general_agent.v1 import agent_service_pb2, turn_pb2

SERVICE = agent_service_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name


def _replay_handler(responses: Sequence[turn_pb2.StreamTurnResponse]) -> grpc.GenericRpcHandler:
    """AgentService with StreamTurn alone, answering every call with `responses` (other methods: UNIMPLEMENTED)."""

    async def stream_turn(request: turn_pb2.StreamTurnRequest, context: Any) -> AsyncIterator[Any]:
        for response in responses:
            yield response

    method = grpc.unary_stream_rpc_method_handler(
        stream_turn,
        request_deserializer=turn_pb2.StreamTurnRequest.FromString,
        response_serializer=turn_pb2.StreamTurnResponse.SerializeToString,
    )
    return grpc.method_handlers_generic_handler(SERVICE, {"StreamTurn": method})


def encode_responses(responses: Sequence[bytes]) -> str:
    return json.dumps([base64.b64encode(r).decode("ascii") for r in responses])


def decode_responses(text: str) -> list[turn_pb2.StreamTurnResponse]:
    return [turn_pb2.StreamTurnResponse.FromString(base64.b64decode(item)) for item in json.loads(text)]


async def serve(responses: list[turn_pb2.StreamTurnResponse], ready_file: Path) -> None:
    server = grpc.aio.server(handlers=[_replay_handler(responses)])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    tmp = ready_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({"address": f"127.0.0.1:{port}", "pid": os.getpid()}))
    os.replace(tmp, ready_file)
    await server.wait_for_termination()


async def start_transport_floor(
    stack: contextlib.AsyncExitStack, workdir: Path, cpu: int, responses: Sequence[bytes]
) -> tuple[ManagedProcess, str]:
    """The floor server on `cpu`, answering every StreamTurn with `responses` (serialised StreamTurnResponses)."""
    if not responses:
        raise ValueError("responses: the floor needs the responses of one turn, got none")
    source = workdir / "transport-floor-responses.json"
    source.write_text(encode_responses(responses))
    env = without_service_settings()
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    argv = [sys.executable, "-m", "bench.transport_floor", "--responses", str(source)]
    proc, data = await start_announcing(
        stack, workdir, name="transport floor", slug="transport-floor", argv=argv, env=env, cpu=cpu
    )
    return proc, str(data["address"])


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.transport_floor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--responses", type=Path, required=True, help="JSON list of base64 StreamTurnResponses")
    parser.add_argument("--ready-file", type=Path, required=True)
    args = parser.parse_args()
    asyncio.run(serve(decode_responses(args.responses.read_text()), args.ready_file))


if __name__ == "__main__":
    main()
