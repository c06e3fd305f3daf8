"""Content parts: turn input in, message and tool output out."""

from __future__ import annotations

from typing import Any

from general_agent.v1 import content_pb2
from general_agent_server.domain.content import ContentPart, ImagePart, TextPart
from general_agent_server.domain.errors import invalid_argument


def parts_from_proto(parts: Any, field: str) -> tuple[ContentPart, ...]:
    out: list[ContentPart] = []
    for index, part in enumerate(parts):
        which = part.WhichOneof("part")
        if which == "text":
            out.append(TextPart(text=part.text.text))
        elif which == "image":
            out.append(ImagePart(mime_type=part.image.mime_type, data=part.image.data))
        elif which == "tool_result":
            raise invalid_argument(
                f"{field}[{index}].tool_result",
                "tool results are not turn input: use SubmitHostedToolResult (or RunSession hosted_result)",
            )
        else:
            raise invalid_argument(f"{field}[{index}]", "empty content part: set text or image")
    return tuple(out)


def parts_to_proto(parts: tuple[ContentPart, ...]) -> list[content_pb2.ContentPart]:
    out = []
    for part in parts:
        if isinstance(part, TextPart):
            out.append(content_pb2.ContentPart(text=content_pb2.TextPart(text=part.text)))
        else:
            out.append(content_pb2.ContentPart(image=content_pb2.ImagePart(mime_type=part.mime_type, data=part.data)))
    return out
