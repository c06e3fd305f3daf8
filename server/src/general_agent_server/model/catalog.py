"""One capability table keyed by model family: context window, maximum output, thinking kind, images.
Model refs are `anthropic/<id>` or a bare id; the provider prefix is stripped before the request."""

from __future__ import annotations

import enum
import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace


class ThinkingKind(enum.Enum):
    NONE = "none"
    ADAPTIVE = "adaptive"
    BUDGET = "budget"


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelCapabilities:
    family: str
    context_window: int
    max_output_tokens: int
    thinking: ThinkingKind
    images: bool = True
    # Thinking between tool calls needs the interleaved-thinking beta (the Claude 4 families with budget
    # thinking); adaptive-thinking families interleave without it, older ones cannot.
    interleaved_thinking_beta: bool = False


INTERLEAVED_THINKING_BETA = "interleaved-thinking-2025-05-14"


# Longest marker first: the first marker contained in the model id decides the family.
_FAMILIES: tuple[tuple[str, ModelCapabilities], ...] = tuple(
    (
        marker,
        ModelCapabilities(
            family=marker, context_window=cw, max_output_tokens=out, thinking=kind, interleaved_thinking_beta=beta
        ),
    )
    for marker, cw, out, kind, beta in (
        ("opus-4-6", 200_000, 128_000, ThinkingKind.ADAPTIVE, False),
        ("sonnet-4-6", 200_000, 64_000, ThinkingKind.ADAPTIVE, False),
        ("opus-4-5", 200_000, 64_000, ThinkingKind.BUDGET, True),
        ("sonnet-4-5", 200_000, 64_000, ThinkingKind.BUDGET, True),
        ("haiku-4-5", 200_000, 64_000, ThinkingKind.BUDGET, True),
        ("opus-4-1", 200_000, 32_000, ThinkingKind.BUDGET, True),
        ("opus-4", 200_000, 32_000, ThinkingKind.BUDGET, True),
        ("3-opus", 200_000, 4_096, ThinkingKind.NONE, False),
        ("sonnet-4", 200_000, 64_000, ThinkingKind.BUDGET, True),
        ("3-7-sonnet", 200_000, 64_000, ThinkingKind.BUDGET, False),
        ("3-5-haiku", 200_000, 8_192, ThinkingKind.NONE, False),
        ("3-5-sonnet", 200_000, 8_192, ThinkingKind.NONE, False),
        ("3-haiku", 200_000, 4_096, ThinkingKind.NONE, False),
    )
)

UNKNOWN_MODEL = ModelCapabilities(
    family="unknown", context_window=200_000, max_output_tokens=16_384, thinking=ThinkingKind.NONE
)


def provider_model_id(model_ref: str) -> str:
    """`anthropic/claude-x` → `claude-x`; a bare id is returned unchanged."""
    provider, sep, model = model_ref.partition("/")
    return model if sep and provider == "anthropic" else model_ref


def provider_and_model(model_ref: str) -> tuple[str, str]:
    """What hooks see of a model ref: `(provider, model)`, the provider `anthropic` for a bare id."""
    provider, _, model = model_ref.rpartition("/")
    return provider or "anthropic", model


@functools.lru_cache(maxsize=1024)
def _row(model_id: str) -> ModelCapabilities:
    """Looked up once per model id: requests ask for every assistant message of a history."""
    return next((c for marker, c in _FAMILIES if marker in model_id), UNKNOWN_MODEL)


def capabilities(model_ref: str, context_windows: Sequence[tuple[str, int]] = ()) -> ModelCapabilities:
    """The model's row of the table; `context_windows` (the setting of that name) overrides its window: the
    first entry whose key the model id contains wins."""
    model_id = provider_model_id(model_ref).lower().replace(".", "-")
    caps = _row(model_id)
    if not context_windows:
        return caps
    window = next((tokens for key, tokens in context_windows if key.lower().replace(".", "-") in model_id), None)
    return caps if window is None else replace(caps, context_window=window)
