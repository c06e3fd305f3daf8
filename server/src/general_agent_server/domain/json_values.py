"""JSON that hosts send as text (hosted-tool schemas, tool outputs): parsed once, here, with the limits
every JSON value the server keeps must meet.

- Numbers are finite: the JSON grammar has no NaN or Infinity (Python's parser accepts them, and turns
  `1e999` into infinity), and `google.protobuf.Value` cannot carry them to clients.
- Nesting is bounded: the server hands these values back inside protobuf messages (events, sessions,
  hook calls), and protobuf decoders refuse messages nested more than 100 levels; every JSON level costs
  up to three of them (Struct, its map entry, Value).
"""

from __future__ import annotations

import json
import math
from typing import Any

from general_agent_server.domain.errors import clipped, invalid_argument

# 24 JSON levels are 72 protobuf levels inside a Struct; the deepest message that carries one (a RunSession
# event around a tool result's details) adds a handful, which keeps clients below their limit of 100.
MAX_JSON_DEPTH = 24


class _NotAJsonNumber(ValueError):
    pass


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotAJsonNumber(text)
    return value


def _finite_int(text: str) -> int:
    try:
        value = int(text)
        float(value)  # beyond the range of a double, which is all a protobuf Value holds
    except (ValueError, OverflowError):
        raise _NotAJsonNumber(text) from None
    return value


def _no_constant(text: str) -> Any:
    raise _NotAJsonNumber(text)


def parse_json(field_path: str, text: str) -> Any:
    """Parses `text`, refusing what is not plain JSON within the limits (INVALID_ARGUMENT naming the field)."""
    try:
        value = json.loads(text, parse_float=_finite_float, parse_int=_finite_int, parse_constant=_no_constant)
    except _NotAJsonNumber as exc:
        raise invalid_argument(
            field_path, f"holds {clipped(str(exc), 24)}, which is not a finite JSON number"
        ) from None
    except RecursionError:
        raise invalid_argument(field_path, f"is nested deeper than {MAX_JSON_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise invalid_argument(field_path, f"is not valid JSON: {exc.msg} at position {exc.pos}") from None
    check_json_depth(field_path, value)
    return value


def json_depth(value: Any) -> int:
    """Levels of objects and arrays (a scalar is 0, `{"a": [1]}` is 2); iterative, so any depth is safe."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def check_json_depth(field_path: str, value: Any) -> None:
    if json_depth(value) > MAX_JSON_DEPTH:
        raise invalid_argument(field_path, f"is nested deeper than {MAX_JSON_DEPTH} levels")
