"""What the serving process does before it serves: the first model call after a start must not import the SDK's
HTTP stack or build the configured credential's client on the event loop (that took ~145 ms, stalling every other
session), and what start-up built is frozen out of the garbage collector's sight. Checked in fresh interpreters,
since this test process has imported everything already (and must not freeze its objects)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from general_agent_server.app import RunningServer

_PROBE = textwrap.dedent(
    """
    import asyncio, sys
    from general_agent_server.model.anthropic import AnthropicModelClient
    from general_agent_server.model.port import Credential

    print("httpcore2 and aiohttp at import:", "httpcore2" in sys.modules and "aiohttp" in sys.modules)
    client = AnthropicModelClient(timeout_seconds=10)
    credential = Credential(api_key="sk-ant-warm-up-test-0000", base_url="http://127.0.0.1:9")

    async def main():
        print("anyio backend before warm:", "anyio._backends._asyncio" in sys.modules)
        await client.warm([credential])
        print("anyio backend after warm:", "anyio._backends._asyncio" in sys.modules)
        built = client._client(credential)
        print("client kept:", client._client(Credential(api_key=credential.api_key, base_url=credential.base_url))
              is built and len(client._clients) == 1)
        await client.close()

    asyncio.run(main())
    """
)


def test_warm_up_imports_the_http_stack_and_builds_the_configured_clients() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.splitlines() == [
        "httpcore2 and aiohttp at import: True",
        "anyio backend before warm: False",
        "anyio backend after warm: True",
        "client kept: True",
    ]


async def test_a_started_server_has_built_its_default_credentials_client(server: RunningServer) -> None:
    """The server's own default credential (ANTHROPIC_API_KEY here) has its client before health says SERVING."""
    assert len(server.model._clients) == 1


def test_the_serving_process_freezes_what_start_up_built() -> None:
    probe = (
        "import gc; from general_agent_server.app import freeze_start_up; "
        "before = gc.get_freeze_count(); frozen = freeze_start_up(); "
        "print(before == 0 and frozen > 10_000 and len(gc.get_objects()) < frozen // 10)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.strip() == "True"


_NAMED_PROBE = textwrap.dedent(
    """
    import asyncio
    import sniffio
    from general_agent_server.app import name_the_loop_library

    def outside_a_task():
        try:
            return sniffio.current_async_library()
        except sniffio.AsyncLibraryNotFoundError:
            return "not found"

    async def from_a_callback():
        # A callback runs outside any task: there only the thread's name can answer.
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        loop.call_soon(lambda: answer.set_result(outside_a_task()))
        return await answer

    async def main():
        before = await from_a_callback()
        name_the_loop_library()
        after = await from_a_callback()
        worker = await asyncio.to_thread(outside_a_task)
        print(before, "|", after, "|", worker)

    asyncio.run(main())
    """
)


def test_the_serving_thread_tells_sniffio_it_runs_asyncio_and_other_threads_stay_unnamed() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _NAMED_PROBE], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.split(" | ") == ["not found", "asyncio", "not found\n"]
