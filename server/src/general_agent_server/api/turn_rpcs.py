"""The turn RPCs of AgentService (api/servicer.py composes them): the streams (StreamTurn, WatchSession,
RunSession) and the run's steering and stop (InjectMessage, RequestStop, ClearStop, CancelRun)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from general_agent.v1 import run_session_pb2 as run_session_api
from general_agent.v1 import turn_pb2 as turn_api
from general_agent_server.api import convert
from general_agent_server.api.decoding import InvalidRequest
from general_agent_server.api.rpc import AgentRpcs, Context, call_context
from general_agent_server.domain.errors import invalid_argument


class TurnRpcs(AgentRpcs):
    async def StreamTurn(
        self, request: turn_api.StreamTurnRequest, context: Context
    ) -> AsyncIterator[turn_api.StreamTurnResponse]:
        events = self._agent.runs.stream_turn(
            call_context(context),
            request.session_id,
            convert.parts_from_proto(request.input, "input"),
            options=convert.turn_options_from_proto(request.options),
            idem=convert.idempotency(request),
        )
        async for event in events:
            response = turn_api.StreamTurnResponse()
            convert.event_to_proto(event, response.event)
            yield response

    async def WatchSession(
        self, request: turn_api.WatchSessionRequest, context: Context
    ) -> AsyncIterator[turn_api.WatchSessionResponse]:
        after = request.after_sequence if request.HasField("after_sequence") else None
        async for event in self._agent.runs.watch(call_context(context), request.session_id, after):
            response = turn_api.WatchSessionResponse()
            convert.event_to_proto(event, response.event)
            yield response

    async def RunSession(
        self, request_iterator: AsyncIterator[run_session_api.RunSessionRequest | InvalidRequest], context: Context
    ) -> AsyncIterator[run_session_api.RunSessionResponse]:
        """Requests that api/decoding.py refused arrive as InvalidRequest: the first one ends the call, a
        later one is answered with a command_result."""
        first = await anext(aiter(request_iterator), None)
        if first is None:
            raise invalid_argument("attach", "the stream ended before attach")
        attach = convert.attach_from_proto(first)
        commands = (convert.command_from_proto(r, attach.on_disconnect) async for r in request_iterator)
        stream = self._agent.attach(call_context(context), attach)
        async for output in stream.run(commands):
            yield convert.run_output_to_proto(output)

    async def InjectMessage(
        self, request: turn_api.InjectMessageRequest, context: Context
    ) -> turn_api.InjectMessageResponse:
        run_id = await self._agent.runs.inject(
            call_context(context),
            request.session_id,
            convert.parts_from_proto(request.input, "input"),
            idem=convert.idempotency(request),
        )
        return turn_api.InjectMessageResponse(accepted=bool(run_id), run_id=run_id)

    async def RequestStop(self, request: turn_api.RequestStopRequest, context: Context) -> turn_api.RequestStopResponse:
        run_id = await self._agent.runs.request_stop(call_context(context), request.session_id)
        return turn_api.RequestStopResponse(run_id=run_id)

    async def ClearStop(self, request: turn_api.ClearStopRequest, context: Context) -> turn_api.ClearStopResponse:
        was_set = await self._agent.runs.clear_stop(call_context(context), request.session_id)
        return turn_api.ClearStopResponse(was_set=was_set)

    async def CancelRun(self, request: turn_api.CancelRunRequest, context: Context) -> turn_api.CancelRunResponse:
        run_id = await self._agent.runs.cancel_run(call_context(context), request.session_id, request.run_id)
        return turn_api.CancelRunResponse(cancelled=bool(run_id), run_id=run_id)
