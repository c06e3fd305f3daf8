"""Hosted tools: async functions the host runs when the model calls them (docs/python-client.md).

A handler takes the tool input either as keyword arguments (the JSON Schema comes from the parameters'
type hints and defaults) or as one pydantic model (the schema is the model's); its docstring is the tool's
description unless one is given. It returns the output: a string is the tool's text, anything else (a dict,
a list, a pydantic model) its JSON. An exception is answered as a tool error with its message, which the
model sees as ``is_error``. Input is validated (and coerced) with pydantic before the handler runs; an
invalid input is a tool error too.

Example::

    @client.hosted_tool("weather")
    async def weather(city: str, days: int = 1) -> str:
        "The forecast for a city."
        return f"sunny in {city} for {days} days"
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeAlias, get_type_hints

import pydantic
from google.protobuf import json_format, struct_pb2

from general_agent import _convert as conv
from general_agent.v1 import hosted_tool_pb2

__all__ = ["HostedTool", "HostedToolRegistry", "ToolHandler"]

ToolHandler: TypeAlias = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class HostedTool:
    """One registered hosted tool: its definition and how to call its handler."""

    name: str
    description: str
    input_schema: dict[str, Any]
    handler: ToolHandler
    model: type[pydantic.BaseModel]
    takes_model: bool
    timeout: float | None = None

    def definition(self) -> hosted_tool_pb2.HostedToolDefinition:
        """The ``HostedToolDefinition`` declared on a session."""
        schema = struct_pb2.Struct()
        json_format.ParseDict(self.input_schema, schema)
        return hosted_tool_pb2.HostedToolDefinition(
            name=self.name,
            description=self.description,
            input_schema=schema,
            input_schema_json=conv.to_json(self.input_schema),
            timeout=conv.duration(self.timeout),
        )

    async def call(self, tool_input: dict[str, Any]) -> Any:
        """Validates the input and runs the handler; raises ``pydantic.ValidationError`` on bad input."""
        parsed = self.model.model_validate(tool_input)
        if self.takes_model:
            return await self.handler(parsed)
        return await self.handler(**{name: getattr(parsed, name) for name in type(parsed).model_fields})


def _input_model(name: str, handler: ToolHandler) -> tuple[type[pydantic.BaseModel], bool]:
    """The pydantic model of the handler's input, and whether the handler takes that model itself."""
    signature = inspect.signature(handler)
    hints = get_type_hints(handler)
    params = list(signature.parameters.values())
    if len(params) == 1:
        hint = hints.get(params[0].name)
        if inspect.isclass(hint) and issubclass(hint, pydantic.BaseModel):
            return hint, True
    fields: dict[str, Any] = {}
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"hosted tool {name!r}: *args and **kwargs have no schema")
        hint = hints.get(param.name, Any)
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hint, default)
    model: type[pydantic.BaseModel] = pydantic.create_model(
        f"{name}_input", __config__=pydantic.ConfigDict(extra="forbid"), **fields
    )
    return model, False


def build_tool(
    name: str, handler: ToolHandler, *, description: str | None = None, timeout: float | None = None
) -> HostedTool:
    if not inspect.iscoroutinefunction(handler):
        raise TypeError(f"hosted tool {name!r}: the handler must be an async function")
    model, takes_model = _input_model(name, handler)
    schema = model.model_json_schema()
    schema.pop("title", None)
    text = description if description is not None else inspect.getdoc(handler) or ""
    return HostedTool(
        name=name,
        description=text,
        input_schema=schema,
        handler=handler,
        model=model,
        takes_model=takes_model,
        timeout=timeout,
    )


class HostedToolRegistry:
    """The hosted tools of one client, by name."""

    def __init__(self) -> None:
        self._tools: dict[str, HostedTool] = {}

    def add(self, tool: HostedTool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"hosted tool {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def decorator(
        self, name: str | None = None, *, description: str | None = None, timeout: float | None = None
    ) -> Callable[[ToolHandler], ToolHandler]:
        def register(handler: ToolHandler) -> ToolHandler:
            self.add(build_tool(name or handler.__name__, handler, description=description, timeout=timeout))
            return handler

        return register

    def get(self, name: str) -> HostedTool | None:
        return self._tools.get(name)

    def definitions(self) -> list[hosted_tool_pb2.HostedToolDefinition]:
        return [tool.definition() for tool in self._tools.values()]

    def __iter__(self) -> Iterator[HostedTool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)
