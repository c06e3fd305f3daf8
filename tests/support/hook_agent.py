"""A server set up for hook tests (loopback hook targets allow-listed, workspaces in a temp dir), its stub,
and the recording hook hosts a test started. Leaving `open_agent` stops the server, then the hosts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format

from general_agent.v1 import agent_service_pb2_grpc, hook_registration_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent_server.app import RunningServer
from tests.conftest import ServerFactory
from tests.support.hook_host import Answer, HookHost, registration
from tests.support.rpc import Stub

# Hook hosts listen on loopback, which the SSRF guard refuses unless allow-listed.
ALLOW_LOOPBACK = {"GENERAL_AGENT_SSRF_ALLOW_HOSTS": "127.0.0.1"}


@dataclass
class Agent:
    server: RunningServer
    stub: Stub
    workspaces: Path
    hosts: list[HookHost] = field(default_factory=list)

    def workspace(self, session_id: str) -> Path:
        path = self.workspaces / "default" / session_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    async def host(self, answers: dict[str, Answer] | None = None) -> HookHost:
        host = HookHost(answers)
        await host.start()
        self.hosts.append(host)
        return host

    async def register(
        self, plugin_id: str, address: str, bindings: list[hook_registration_pb2.HookBinding] | tuple[str, ...]
    ) -> hook_registration_pb2.HookRegistration:
        request = hook_registration_pb2.RegisterHooksRequest(registration=registration(plugin_id, address, bindings))
        response = await self.stub.RegisterHooks(request)
        return response.registration

    async def history(self, session_id: str) -> list[Any]:
        response = await self.stub.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=session_id))
        return list(response.entries)


@asynccontextmanager
async def open_agent(
    server_factory: ServerFactory, root: Path, env: dict[str, str] | None = None, *, state_dir: Path | None = None
) -> AsyncIterator[Agent]:
    workspaces = root / "workspaces"
    server = await server_factory(
        {**ALLOW_LOOPBACK, "GENERAL_AGENT_WORKSPACE_DIR": str(workspaces), **(env or {})}, state_dir=state_dir
    )
    async with grpc.aio.insecure_channel(server.address) as channel:
        agent = Agent(server=server, stub=agent_service_pb2_grpc.AgentServiceStub(channel), workspaces=workspaces)
        try:
            yield agent
        finally:
            # The server first: its shutdown still delivers session_end and gateway_stop to the hosts.
            await server.stop(grace=1.0)
            for host in agent.hosts:
                await host.stop()


def as_dict(message: Any) -> dict[str, Any]:
    """A Struct (or any message) as plain JSON values."""
    value: dict[str, Any] = json_format.MessageToDict(message)
    return value
