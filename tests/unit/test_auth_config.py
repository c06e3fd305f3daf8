"""The `[auth]` and `[tenants.<name>]` tables of the settings file (docs/security.md), and the authenticator
over them: each error names its entry and key; tokens are kept as digests only."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from general_agent_server.auth import Authenticator
from general_agent_server.auth.config import token_digest
from general_agent_server.config import ConfigError, load_settings
from general_agent_server.domain.context import CallerRole
from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.security.redaction import redact_text

TOKEN = "a-long-enough-token-0123456789"


def load(tmp_path: Path, text: str, **environ: str) -> object:
    config = tmp_path / "config.toml"
    config.write_text(text)
    return load_settings(None, {"GENERAL_AGENT_CONFIG": str(config), **environ})


def entry(**keys: str) -> str:
    return "[[auth.tokens]]\n" + "".join(f'{k} = "{v}"\n' for k, v in keys.items())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (entry(name="a", tenant="t", role="tenant"), "auth.tokens[0]: set exactly one of"),
        (entry(name="a", tenant="t", role="tenant", token_env="X", token_file="/f"), "exactly one of"),
        (entry(name="a", tenant="t", role="boss", token_env="T"), "auth.tokens[0].role"),
        (entry(name="a", tenant="../x", role="tenant", token_env="T"), "auth.tokens[0].tenant"),
        (entry(tenant="t", role="tenant", token_env="T"), "auth.tokens[0].name: required"),
        (entry(name="a", tenant="t", role="tenant", token_sha256="abc"), "token_sha256: expected 64 hex"),
        (entry(name="a", tenant="t", role="tenant", token_env="UNSET_VARIABLE"), "is not set"),
        (entry(name="a", tenant="t", role="tenant", token_env="SHORT"), "shorter than 16"),
        (entry(name="a", tenant="t", role="tenant", token_file="/no/such/file"), "token_file: cannot read"),
        (entry(name="a", tenant="t", role="tenant", token_env="T", token="x"), "unknown key(s) token"),
        (entry(name="a", tenant="t", role="tenant", token_env="T") * 2, "auth.tokens[1].name"),
        ("[tenants.t]\nexec = 1\n", "tenants.t.exec"),
        ("[tenants.t]\nmax_sessions = -1\n", "tenants.t.max_sessions"),
        ("[tenants.t]\nlimits = 1\n", "unknown key(s) limits"),
        ('[[auth.client_certs]]\nsubject = "cn"\ntenant = "t"\nrole = "tenant"\n', "needs tls_client_ca_file"),
    ],
)
def test_invalid_tables_are_refused_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(tmp_path, text, T=TOKEN, SHORT="short")


def test_a_non_loopback_listen_is_allowed_once_tokens_are_configured(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no auth is configured"):
        load(tmp_path, "", GENERAL_AGENT_LISTEN="0.0.0.0:0")
    text = entry(name="a", tenant="t", role="tenant", token_env="T")
    settings = load(tmp_path, text, T=TOKEN, GENERAL_AGENT_LISTEN="0.0.0.0:0")
    assert settings.listen == "0.0.0.0:0"  # type: ignore[attr-defined]


def test_tokens_are_kept_as_digests_and_registered_as_secrets(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("file-token-0123456789abcdef\n")
    text = entry(name="env", tenant="a", role="tenant", token_env="T") + entry(
        name="file", tenant="ops", role="admin", token_file=str(token_file)
    )
    settings = load(tmp_path, text, T=TOKEN)
    tokens = settings.auth.tokens  # type: ignore[attr-defined]
    assert [t.digest for t in tokens] == [token_digest(TOKEN), token_digest("file-token-0123456789abcdef")]
    assert TOKEN not in repr(settings)
    assert TOKEN not in redact_text(f"the token is {TOKEN}")
    assert settings.auth.admin_tenants() == {"ops"}  # type: ignore[attr-defined]


def test_tenant_tables_override_the_server_settings(tmp_path: Path) -> None:
    text = entry(name="a", tenant="a", role="tenant", token_env="T") + (
        '[tenants.a]\nexec = true\nmax_concurrent_runs = 2\nmax_sessions = 5\napproval_policy = ["mutating"]\n'
    )
    rules = load(tmp_path, text, T=TOKEN).core().tenants  # type: ignore[attr-defined]
    assert (rules.exec_allowed("a"), rules.exec_allowed("b")) == (True, False)
    assert (rules.max_runs("a"), rules.max_runs("b")) == (2, 64)
    assert (rules.max_sessions("a"), rules.max_sessions("b")) == (5, 100_000)
    assert rules.approval_policy("a", ()) == ("mutating",)
    assert rules.approval_policy("b", ("all",)) == ("all",)


def authenticator(tmp_path: Path) -> Authenticator:
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    text = entry(name="svc", tenant="a", role="tenant", token_sha256=digest)
    return Authenticator(load(tmp_path, text).auth)  # type: ignore[attr-defined]


def test_the_authenticator_maps_a_token_to_its_tenant_and_role(tmp_path: Path) -> None:
    caller = authenticator(tmp_path).authenticate([("authorization", f"bearer {TOKEN}")])
    assert (caller.tenant, caller.role, caller.principal) == ("a", CallerRole.TENANT, "svc")


@pytest.mark.parametrize(
    "metadata",
    [
        [],
        [("authorization", "Bearer")],
        [("authorization", f"Token {TOKEN}")],
        [("authorization", f"Bearer {TOKEN}x")],
        [("authorization", "Bearer " + "x" * 10_000)],
        [("authorization-bin", TOKEN.encode())],
    ],
)
def test_the_authenticator_refuses_anything_else_alike(tmp_path: Path, metadata: list[tuple[str, str | bytes]]) -> None:
    with pytest.raises(ServiceError) as refused:
        authenticator(tmp_path).authenticate(metadata)
    assert (refused.value.code, refused.value.reason) == (ErrorCode.UNAUTHENTICATED, "UNAUTHENTICATED")
    assert refused.value.message == "missing or invalid credentials (authorization: Bearer <token>)"
