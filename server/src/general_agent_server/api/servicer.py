"""AgentService over the agent (agent.py), composed of one class per RPC family, each in its module: sessions
(api/session_rpcs.py), turns and streams (api/turn_rpcs.py), hosted results and approvals (api/hosted_rpcs.py),
state besides turns (api/state_rpcs.py), hooks and server information (api/admin_rpcs.py). Each method converts
its request, calls one of the agent's services and converts the answer; errors leave through api/errors.abort
(api/rpc.py). RPCs of capabilities this build does not serve yet answer UNIMPLEMENTED with ErrorInfo naming the
capability (the generated base class)."""

from __future__ import annotations

from general_agent.v1 import agent_service_pb2_grpc as api_grpc
from general_agent.v1 import server_info_pb2 as server_info_api
from general_agent_server.agent import Agent
from general_agent_server.api.admin_rpcs import AdminRpcs
from general_agent_server.api.hosted_rpcs import HostedRpcs
from general_agent_server.api.session_rpcs import SessionRpcs
from general_agent_server.api.state_rpcs import StateRpcs
from general_agent_server.api.turn_rpcs import TurnRpcs


class AgentServicer(SessionRpcs, TurnRpcs, HostedRpcs, StateRpcs, AdminRpcs, api_grpc.AgentServiceServicer):
    def __init__(self, agent: Agent, *, limits: server_info_api.ServerLimits) -> None:
        super().__init__(agent, limits=limits)
