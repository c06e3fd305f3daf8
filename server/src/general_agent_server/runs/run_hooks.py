"""The hooks a run calls, in pipeline order (docs/hooks.md, "Order"): before_model_resolve and the legacy
before_agent_start at admission, before_prompt_build before the first model call, llm_input with every first
call, and agent_end then llm_output after run_finished.

A modifying hook's timeouts are capped by the run's remaining deadline; a fail-closed failure of one fails the
run HOOK_FAILED."""

from __future__ import annotations

from typing import Any

from general_agent_server.domain.content import ContentPart, TextPart
from general_agent_server.domain.errors import ErrorCode, ErrorDetail
from general_agent_server.domain.events import RunOutcome, RunReason, StopReason
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.session import Usage
from general_agent_server.hooks.payloads import MessageHistory, without_images
from general_agent_server.hooks.runner import HookFailedError, apply_model_override, system_prompt_with_context
from general_agent_server.hooks.session_hooks import WRITE_PATH_HOOKS, SessionHooks
from general_agent_server.model.catalog import provider_and_model
from general_agent_server.runs.state import ActiveRun, Failed, ModelHookAnswers, PromptPlan, RunFailed

# Hooks that make the run wait for its admission commit before the first model call (hook order).
RUN_HOOKS = frozenset({"before_model_resolve", "before_agent_start", "before_prompt_build", "llm_input"}) | (
    WRITE_PATH_HOOKS
)
END_HOOKS = frozenset({"agent_end", "llm_output"})
# The hooks that may change a run's model: asked once, at admission, so run_started names the model used.
MODEL_HOOKS = frozenset({"before_model_resolve", "before_agent_start"})


def prompt_text(parts: tuple[ContentPart, ...] | list[dict[str, Any]]) -> str:
    """The text of a user message, as the prompt hooks see it."""
    texts = []
    for part in parts:
        if isinstance(part, TextPart):
            texts.append(part.text)
        elif isinstance(part, dict) and part.get("type") == "text":
            texts.append(str(part.get("text", "")))
    return "\n".join(texts)


def hook_failed(failure: Exception, stop_reason: StopReason | None) -> Failed:
    return Failed(
        reason=RunReason.HOOK_FAILED,
        detail=ErrorDetail(code=ErrorCode.FAILED_PRECONDITION, reason="HOOK_FAILED", message=str(failure)),
        stop_reason=stop_reason,
    )


async def ask_hook(
    hooks: SessionHooks,
    run: ActiveRun,
    hook: str,
    event: dict[str, Any],
    *,
    budget: float,
    stop_reason: StopReason | None,
    **context: str,
) -> dict[str, Any] | None:
    """A modifying hook's merged result (None: no opinion); a fail-closed failure raises RunFailed."""
    try:
        outcome = await hooks.run(hook, event, run.run_id, budget=budget, **context)
    except HookFailedError as exc:
        raise RunFailed(hook_failed(exc, stop_reason)) from None
    return outcome.result if outcome is not None else None


async def ask_model_hooks(
    hooks: SessionHooks, run_id: str, prompt: str, before: list[HistoryMessage], model_ref: str, *, budget: float
) -> ModelHookAnswers:
    """before_model_resolve, then the legacy before_agent_start (whose prompt fields apply later, with
    before_prompt_build's); the resolve hook's override wins over the legacy one."""
    try:
        resolve = await hooks.run("before_model_resolve", {"prompt": prompt}, run_id, budget=budget)
        legacy = await hooks.run(
            "before_agent_start",
            {"prompt": prompt, "messages": MessageHistory(tuple(m.api_message() for m in before))},
            run_id,
            budget=budget,
        )
    except HookFailedError as failure:
        return ModelHookAnswers(model_ref=model_ref, failure=failure)
    resolved = resolve.result if resolve is not None else None
    legacy_result = legacy.result if legacy is not None else None
    chosen = (
        resolved if resolved and (resolved.get("modelOverride") or resolved.get("providerOverride")) else legacy_result
    )
    return ModelHookAnswers(model_ref=apply_model_override(model_ref, chosen), legacy=legacy_result)


def _merge_prompt_fields(build: dict[str, Any] | None, legacy: dict[str, Any] | None) -> dict[str, Any]:
    """systemPrompt: the first that sets it; the context fields concatenated (the new hook first)."""
    merged: dict[str, Any] = {}
    for result in (build, legacy):
        if not result:
            continue
        if result.get("systemPrompt") and "systemPrompt" not in merged:
            merged["systemPrompt"] = result["systemPrompt"]
        for key in ("prependContext", "prependSystemContext", "appendSystemContext"):
            if result.get(key):
                merged[key] = f"{merged[key]}\n\n{result[key]}" if merged.get(key) else result[key]
    return merged


async def prepare_prompt(
    hooks: SessionHooks,
    run: ActiveRun,
    history: list[HistoryMessage],
    *,
    base_prompt: str,
    budget: float,
    stop_reason: StopReason | None,
) -> PromptPlan:
    """The model/prompt hooks, once per run before its first model call, then llm_input."""
    if not hooks.wants(RUN_HOOKS):
        return PromptPlan(model_ref=run.model_ref)
    # The admission's transcript writes (and their write-path hooks) come first in hook order.
    await run.admitted.wait()
    message = next((m for m in reversed(history) if m.role == "user" and m.run_id == run.run_id), None)
    prompt = prompt_text(list(message.content) if message else [])
    earlier = [m for m in history if m.run_id != run.run_id]
    answers = run.model_hooks
    if answers is None:
        # A continuation in a new process: the model was resolved before; ask again for the prompt fields.
        answers = await ask_model_hooks(hooks, run.run_id, prompt, earlier, run.model_ref, budget=budget)
    if answers.failure is not None:
        raise RunFailed(hook_failed(answers.failure, stop_reason))
    before = MessageHistory(tuple(m.api_message() for m in earlier))
    build = await ask_hook(
        hooks,
        run,
        "before_prompt_build",
        {"prompt": prompt, "messages": before},
        budget=budget,
        stop_reason=stop_reason,
    )
    merged = _merge_prompt_fields(build, answers.legacy)
    plan = PromptPlan(
        model_ref=answers.model_ref,
        system_prompt=system_prompt_with_context(base_prompt, merged or None),
        prepend_context=str(merged.get("prependContext", "")),
    )
    provider, model = provider_and_model(plan.model_ref)
    hooks.fire(
        "llm_input",
        {
            "runId": run.run_id,
            "sessionId": hooks.session_id,
            "provider": provider,
            "model": model,
            "systemPrompt": plan.system_prompt,
            "prompt": f"{plan.prepend_context}\n\n{prompt}" if plan.prepend_context else prompt,
            "historyMessages": before,
            "imagesCount": sum(1 for b in (message.content if message else ()) if b.get("type") == "image"),
        },
        run.run_id,
    )
    return plan


def fire_end_hooks(
    hooks: SessionHooks,
    run: ActiveRun,
    history: list[HistoryMessage],
    *,
    outcome: RunOutcome,
    stop_reason: StopReason | None,
    error: ErrorDetail | None,
    last_call_usage: Usage,
    duration_ms: int,
) -> None:
    """agent_end, then llm_output, dispatched after run_finished (and the run's outcome to the observer)."""
    if hooks.runner is not None and hooks.runner.observer is not None:
        hooks.runner.observer.run_ended(outcome.name)
    if not hooks.wants(END_HOOKS):
        return
    produced = [m for m in history if m.run_id == run.run_id]
    success = outcome is RunOutcome.COMPLETED
    event: dict[str, Any] = {
        "messages": MessageHistory(tuple(m.api_message() for m in produced)),
        "success": success,
        "durationMs": duration_ms,
    }
    if not success:
        event["error"] = error.message if error is not None else f"assistant stop reason: {stop_reason}"
    hooks.fire("agent_end", event, run.run_id)
    assistants = [m for m in produced if m.role == "assistant"]
    provider, model = provider_and_model(run.prompt.model_ref if run.prompt is not None else run.model_ref)
    output: dict[str, Any] = {
        "runId": run.run_id,
        "sessionId": hooks.session_id,
        "provider": provider,
        "model": model,
        "assistantTexts": ["\n".join(b["text"] for b in m.content if b.get("type") == "text") for m in assistants],
    }
    if assistants:
        usage = last_call_usage
        output["lastAssistant"] = without_images(assistants[-1].api_message())
        output["usage"] = {
            "input": usage.input_tokens,
            "output": usage.output_tokens,
            "cacheRead": usage.cache_read_input_tokens,
            "cacheWrite": usage.cache_creation_input_tokens,
            "total": usage.context_input_tokens + usage.output_tokens,
        }
    hooks.fire("llm_output", output, run.run_id)
