"""Turns: busy policy and disconnect options, and hosted tool results as the model sees them."""

from __future__ import annotations

import json

from google.protobuf import json_format

from general_agent.v1 import run_session_pb2 as run_session_api
from general_agent.v1 import turn_pb2 as turn_api
from general_agent_server.domain.content import TextPart
from general_agent_server.domain.errors import invalid_argument
from general_agent_server.domain.json_values import parse_json
from general_agent_server.domain.records import CallResult
from general_agent_server.runs.state import BusyPolicy, OnDisconnect, TurnOptions

_BUSY = {
    turn_api.BUSY_POLICY_UNSPECIFIED: BusyPolicy.REJECT,
    turn_api.BUSY_POLICY_REJECT: BusyPolicy.REJECT,
    turn_api.BUSY_POLICY_ENQUEUE: BusyPolicy.ENQUEUE,
    turn_api.BUSY_POLICY_INTERRUPT: BusyPolicy.INTERRUPT,
    turn_api.BUSY_POLICY_STEER: BusyPolicy.STEER,
}


def on_disconnect_from_proto(value: int) -> OnDisconnect:
    return OnDisconnect.CONTINUE if value == turn_api.ON_DISCONNECT_CONTINUE else OnDisconnect.CANCEL


def turn_options_from_proto(options: turn_api.TurnOptions, field: str = "options") -> TurnOptions:
    policy = _BUSY.get(turn_api.BusyPolicy.ValueType(options.busy_policy))
    if policy is None:
        raise invalid_argument(f"{field}.busy_policy", f"unknown busy policy {options.busy_policy}")
    return TurnOptions(busy_policy=policy, on_disconnect=on_disconnect_from_proto(options.on_disconnect))


def hosted_result_from_proto(
    request: turn_api.SubmitHostedToolResultRequest | run_session_api.RunSessionHostedResult, prefix: str = ""
) -> CallResult:
    """A string output becomes the tool text, anything else its JSON (output_json preferred);
    details default to the output; an error submit is is_error for the model. Values arrive checked
    (api/decoding.py): finite numbers, bounded depth."""
    which = request.WhichOneof("result")
    details = json_format.MessageToJson(request.details, indent=None) if request.HasField("details") else ""
    if which == "error":
        return CallResult(
            content=(TextPart(text=request.error or "hosted tool failed"),), details_json=details, is_error=True
        )
    if which == "output_json":
        value = parse_json(f"{prefix}output_json", request.output_json)
        text = value if isinstance(value, str) else request.output_json
        return CallResult(content=(TextPart(text=text),), details_json=details or request.output_json)
    if which == "output":
        value_json = json_format.MessageToJson(request.output, indent=None)
        value = json.loads(value_json)
        text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        return CallResult(content=(TextPart(text=text),), details_json=details or value_json)
    raise invalid_argument(f"{prefix}result", "set one of output, output_json or error")
