"""The Python client's surface, checked against the service descriptor: every AgentService RPC has a method, each
error reason of the common set has its subclass, and the retry policy names only real methods."""

from __future__ import annotations

import inspect
import json

import grpc

from general_agent import RPC_METHODS, AgentClient, errors
from general_agent._transport import RETRIED_METHODS, service_config
from general_agent.v1 import agent_service_pb2, error_reason_pb2

SERVICE = agent_service_pb2.DESCRIPTOR.services_by_name["AgentService"]


def test_every_rpc_of_the_descriptor_has_a_client_method() -> None:
    rpcs = {method.name for method in SERVICE.methods}

    assert set(RPC_METHODS) == rpcs
    for rpc, name in RPC_METHODS.items():
        method = getattr(AgentClient, name, None)
        assert callable(method), f"{rpc}: AgentClient.{name} is missing"
        parameters = list(inspect.signature(method).parameters.values())[1:]
        positional = [p for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
        assert len(positional) <= 4, f"{rpc}: AgentClient.{name} takes too much positionally; use keywords"


def test_the_retry_policy_names_only_unary_rpcs_of_the_service() -> None:
    methods = {method.name: method for method in SERVICE.methods}
    config = json.loads(service_config())

    names = [entry["method"] for entry in config["methodConfig"][0]["name"]]
    assert names == list(RETRIED_METHODS)
    for name in names:
        assert name in methods
        assert not methods[name].client_streaming
        assert not methods[name].server_streaming, f"{name} streams: a retry could replay events"
    assert {"StreamTurn", "RunSession", "SubmitHostedToolResult", "RequestStop", "CancelRun"}.isdisjoint(names)
    assert config["methodConfig"][0]["retryPolicy"]["retryableStatusCodes"] == ["UNAVAILABLE"]


def test_common_reasons_have_their_own_error_class() -> None:
    names = error_reason_pb2.ErrorReason.keys()
    reasons = {name.removeprefix("ERROR_REASON_") for name in names}
    common = {
        "SESSION_NOT_FOUND",
        "SESSION_ALREADY_EXISTS",
        "SESSION_BUSY",
        "NO_API_KEY",
        "IDENTITY_MISMATCH",
        "UNKNOWN_TOOL_CALL",
        "TOOL_CALL_ALREADY_RESOLVED",
        "APPROVAL_PENDING",
        "CHECKPOINT_NOT_FOUND",
        "MCP_SERVER_NOT_FOUND",
        "REQUEST_ID_REUSED",
        "INVALID_PAGE_TOKEN",
        "EVENTS_EXPIRED",
        "SLOW_CONSUMER",
        "RESOURCE_LIMIT",
        "SHUTTING_DOWN",
    }
    assert common <= reasons
    for reason in common:
        cls = errors.error_class(reason)
        assert cls is not errors.AgentError, reason
        assert issubclass(cls, errors.AgentError)
    assert errors.error_class("APPROVAL_PENDING") is errors.ApprovalPending
    assert errors.error_class("", grpc.StatusCode.UNAUTHENTICATED) is errors.Unauthenticated
    assert errors.error_class("SOMETHING_NEW") is errors.AgentError
