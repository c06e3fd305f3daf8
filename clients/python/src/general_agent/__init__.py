"""Python client for the General Agent Service.

- :class:`AgentClient`: the async client (``await AgentClient.connect(address)``).
- :class:`AgentError` and subclasses: failed calls with their decoded ErrorInfo / BadRequest / RetryInfo.
- :class:`HookServer`: serve ``HookService`` from decorated async handlers and register them.
- :mod:`general_agent.events`: helpers over ``SessionEvent`` and the forward-compatibility rule.
- :mod:`general_agent.v1`: the generated messages and stubs.
- :mod:`general_agent.testing`: test doubles (a fake Anthropic server; needs the ``testing`` extra).
"""

from __future__ import annotations

from general_agent.client import DEFAULT_TIMEOUT, AgentClient, Image, TurnResult
from general_agent.errors import AgentError, NoApiKey, SessionAlreadyExists, SessionBusy, SessionNotFound
from general_agent.events import (
    KNOWN_KINDS,
    aiter_known,
    event_kind,
    is_known,
    is_run_finished,
    is_terminal,
    iter_known,
    outcome_name,
    text_of,
)
from general_agent.hooks import HookServer

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_TIMEOUT",
    "KNOWN_KINDS",
    "AgentClient",
    "AgentError",
    "HookServer",
    "Image",
    "NoApiKey",
    "SessionAlreadyExists",
    "SessionBusy",
    "SessionNotFound",
    "TurnResult",
    "__version__",
    "aiter_known",
    "event_kind",
    "is_known",
    "is_run_finished",
    "is_terminal",
    "iter_known",
    "outcome_name",
    "text_of",
]
