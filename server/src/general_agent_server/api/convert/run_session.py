"""RunSession: the attach, the commands (an undecodable command is rejected, not fatal) and the outputs."""

from __future__ import annotations

from google.protobuf.message import Message

from general_agent.v1 import run_session_pb2 as run_session_api
from general_agent_server.api.convert.approvals import answer_from_proto
from general_agent_server.api.convert.content import parts_from_proto
from general_agent_server.api.convert.events import event_to_proto
from general_agent_server.api.convert.turns import (
    hosted_result_from_proto,
    on_disconnect_from_proto,
    turn_options_from_proto,
)
from general_agent_server.api.convert.values import idempotency
from general_agent_server.api.decoding import InvalidRequest
from general_agent_server.api.errors import status_from_error
from general_agent_server.domain.errors import ServiceError, invalid_argument
from general_agent_server.domain.validation import check_token
from general_agent_server.runs.commands import (
    Attach,
    CancelCommand,
    ClearStopCommand,
    Command,
    EventOut,
    HeartbeatOut,
    HostedResultCommand,
    InjectCommand,
    Output,
    PingCommand,
    RejectedCommand,
    ResolveApprovalCommand,
    StopCommand,
    TurnCommand,
)
from general_agent_server.runs.state import OnDisconnect, TurnOptions


def attach_from_proto(request: run_session_api.RunSessionRequest | InvalidRequest) -> Attach:
    if isinstance(request, InvalidRequest):
        raise request.error
    if request.WhichOneof("command") != "attach":
        raise invalid_argument("attach", "the first RunSession message must be attach")
    attach = request.attach
    return Attach(
        session_id=attach.session_id,
        after_sequence=attach.after_sequence if attach.HasField("after_sequence") else None,
        on_disconnect=on_disconnect_from_proto(attach.on_disconnect),
    )


def command_from_proto(
    request: run_session_api.RunSessionRequest | InvalidRequest, on_disconnect: OnDisconnect
) -> Command:
    """Decodes one command; a command that cannot be decoded becomes a RejectedCommand (answered with
    its error) because only protocol errors end the stream."""
    if isinstance(request, InvalidRequest):
        return RejectedCommand(command_id=_command_id(request.message), error=request.error)
    which = request.WhichOneof("command")
    command_id = ""
    try:
        if which == "turn":
            turn = request.turn
            command_id = turn.command_id
            options = turn_options_from_proto(turn.options, "turn.options")
            return TurnCommand(
                command_id=command_id,
                parts=parts_from_proto(turn.input, "turn.input"),
                options=TurnOptions(busy_policy=options.busy_policy, on_disconnect=on_disconnect),
                idem=idempotency(turn, "turn.request_id"),
            )
        if which == "hosted_result":
            command_id = request.hosted_result.command_id
            check_token("hosted_result.call_id", request.hosted_result.call_id, required=True)
            return HostedResultCommand(
                command_id=command_id,
                call_id=request.hosted_result.call_id,
                result=hosted_result_from_proto(request.hosted_result, "hosted_result."),
            )
        if which == "resolve_approval":
            command = request.resolve_approval
            command_id = command.command_id
            check_token("resolve_approval.call_id", command.call_id, required=True)
            return ResolveApprovalCommand(
                command_id=command_id, call_id=command.call_id, answer=answer_from_proto(command, "resolve_approval.")
            )
        if which == "inject":
            command_id = request.inject.command_id
            return InjectCommand(command_id=command_id, parts=parts_from_proto(request.inject.input, "inject.input"))
        if which == "stop":
            return StopCommand(command_id=request.stop.command_id)
        if which == "clear_stop":
            return ClearStopCommand(command_id=request.clear_stop.command_id)
        if which == "cancel":
            return CancelCommand(command_id=request.cancel.command_id, run_id=request.cancel.run_id)
        if which == "ping":
            return PingCommand()
        if which == "attach":
            raise invalid_argument("attach", "the stream is already attached")
        raise invalid_argument("command", "empty RunSession message")
    except ServiceError as error:
        return RejectedCommand(command_id=command_id, error=error)


def _command_id(request: Message | None) -> str:
    """The command id of a RunSession message, when it could be decoded."""
    which = request.WhichOneof("command") if isinstance(request, run_session_api.RunSessionRequest) else None
    return str(getattr(getattr(request, which), "command_id", "")) if which else ""


def run_output_to_proto(output: Output) -> run_session_api.RunSessionResponse:
    if isinstance(output, EventOut):
        response = run_session_api.RunSessionResponse()
        event_to_proto(output.event, response.event)
        return response
    if isinstance(output, HeartbeatOut):
        return run_session_api.RunSessionResponse(
            heartbeat=run_session_api.Heartbeat(last_sequence=output.last_sequence)
        )
    result = run_session_api.CommandResult(command_id=output.command_id, run_id=output.run_id, accepted=output.accepted)
    if output.error is not None:
        result.status.CopyFrom(status_from_error(output.error))
    else:
        result.status.code = 0
    return run_session_api.RunSessionResponse(command_result=result)
