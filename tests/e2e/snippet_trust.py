"""Runs a TOML snippet that configures authentication (`[[auth.tokens]]`, `[[auth.client_certs]]`, TLS files,
`[tenants.<name>]`): the server starts with it as written, except that the files it names under `/run/secrets/`
are made here (a random token for each `token_file`, a CA made at test time for the `tls_*_file` keys) in a
temporary folder that takes that prefix's place, and each `token_env` variable holds a random token.

Then, when the snippet configures credentials, a call without them is UNAUTHENTICATED, and a call
with each token, and with a client certificate for each `subject`, is served. A `token_sha256` entry is not
tried: its token is not known from the snippet."""

from __future__ import annotations

import secrets
import shutil
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from general_agent.v1 import agent_service_pb2_grpc
from general_agent.v1 import session_messages_pb2 as session_api
from tests.support.certificates import Issued, MadeCA
from tests.support.subprocess_server import ServerProcess

SECRETS_PREFIX = "/run/secrets/"
RPC_TIMEOUT = 30.0
Start = Callable[[tuple[str, ...], dict[str, str]], ServerProcess]


def configures_trust(code: str) -> bool:
    return any(marker in code for marker in ("[[auth.tokens]]", "[[auth.client_certs]]", "[tenants.", "tls_cert_file"))


def run_trust_toml(code: str, root: Path, start: Start) -> None:
    folder = root / "secrets"
    folder.mkdir(exist_ok=True)
    written = code.replace(SECRETS_PREFIX, f"{folder}/")
    config: dict[str, Any] = tomllib.loads(written)
    auth = config.get("auth", {})
    tokens, env = _tokens(auth.get("tokens", []))
    ca = _tls_files(config, folder)
    path = root / "config.toml"
    path.write_text(written)
    server = start(("--config", str(path)), env)

    subjects = [entry["subject"] for entry in auth.get("client_certs", [])]
    if not auth.get("tokens") and not subjects:  # overrides alone: no credentials needed
        _served(_channel(server.address, ca, None), "")
        return
    if ca is None:
        assert not subjects, "[[auth.client_certs]] without tls_client_ca_file cannot be tried"
        _check(server.address, None, None, tokens)
        return
    stranger = ca.issue("nobody-maps-this") if "tls_client_ca_file" in config else None
    _check(server.address, ca, stranger, tokens)
    for subject in subjects:
        _served(_channel(server.address, ca, ca.issue(subject)), "")


def _tokens(entries: list[dict[str, str]]) -> tuple[list[str], dict[str, str]]:
    tokens: list[str] = []
    env: dict[str, str] = {}
    for entry in entries:
        token = secrets.token_urlsafe(24)
        if "token_env" in entry:
            env[entry["token_env"]] = token
        elif "token_file" in entry:
            Path(entry["token_file"]).write_text(token + "\n")
        else:
            continue
        tokens.append(token)
    return tokens, env


def _tls_files(config: dict[str, Any], folder: Path) -> MadeCA | None:
    if "tls_cert_file" not in config:
        return None
    made = folder / "made"
    made.mkdir()
    ca = MadeCA(made)
    server = ca.issue("localhost", dns=("localhost",), server=True)
    shutil.copy(server.cert, config["tls_cert_file"])
    shutil.copy(server.key, config["tls_key_file"])
    if "tls_client_ca_file" in config:
        shutil.copy(ca.cert, config["tls_client_ca_file"])
    return ca


def _channel(address: str, ca: MadeCA | None, client: Issued | None) -> grpc.Channel:
    if ca is None:
        return grpc.insecure_channel(address)
    key, chain = client.pair() if client is not None else (None, None)
    credentials = grpc.ssl_channel_credentials(ca.cert.read_bytes(), private_key=key, certificate_chain=chain)
    return grpc.secure_channel(address, credentials, options=[("grpc.ssl_target_name_override", "localhost")])


def _check(address: str, ca: MadeCA | None, client: Issued | None, tokens: list[str]) -> None:
    with _channel(address, ca, client) as channel, pytest.raises(grpc.RpcError) as refused:
        _list(channel, "")
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, refused.value
    for token in tokens:
        _served(_channel(address, ca, client), token)


def _served(channel: grpc.Channel, token: str) -> None:
    with channel:
        _list(channel, token)


def _list(channel: grpc.Channel, token: str) -> None:
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    stub = agent_service_pb2_grpc.AgentServiceStub(channel)
    stub.ListSessions(session_api.ListSessionsRequest(), timeout=RPC_TIMEOUT, metadata=metadata)
