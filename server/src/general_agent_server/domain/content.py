"""Message content parts: what a user sends in a turn and what a tool returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

IMAGE_MIME_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


@dataclass(frozen=True, kw_only=True, slots=True)
class TextPart:
    text: str
    kind: Literal["text"] = "text"


@dataclass(frozen=True, kw_only=True, slots=True)
class ImagePart:
    mime_type: str
    data: bytes
    kind: Literal["image"] = "image"


ContentPart = TextPart | ImagePart
