"""Options every remote-client policy (`openpi_remote`, `gr00t_remote`) shares: where the server is, how
long to wait for it, and, when evalfleet starts the server itself, what it serves and with what resources.
Kept apart from the protocol modules so that no protocol imports another."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evalfleet.serving.common import DEFAULT_MAX_MESSAGE_MB


class ServerResourceOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gpus: int = 0
    cpus: float = 1
    memory_gb: float = 2


class BatchingOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_batch: int = Field(8, ge=1)
    max_wait_ms: float = Field(5.0, ge=0)


class RemoteClientOptions(BaseModel):
    """Options shared by `openpi_remote` and `gr00t_remote`.

    Client side: `host`, `port` (the backend fills them in when it starts the server), `api_key` (or
    `api_key_env`: the environment variable holding it; evalfleet.secrets moves a literal key there),
    `connect_timeout_s` (how long to wait for the server to become ready, and to come back after it is
    lost), `request_timeout_s` (one request), `max_retries` (re-sends of one request after a lost
    connection), `backoff_s`/`backoff_max_s` (reconnect pacing).
    Server side (used when evalfleet starts the server): `serve` = the policy to serve, given as
    `{type: <registered policy>, <its options>...}`; `batching`; `server_resources`. Without `serve`
    the client talks to a server someone else runs, at `host:port`.
    """

    model_config = ConfigDict(extra="forbid")
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    api_key: str | None = None
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    connect_timeout_s: float = Field(60.0, gt=0)
    request_timeout_s: float = Field(30.0, gt=0)
    max_retries: int = Field(3, ge=0)
    backoff_s: float = Field(0.05, gt=0)
    backoff_max_s: float = Field(2.0, gt=0)
    max_message_mb: float = Field(DEFAULT_MAX_MESSAGE_MB, gt=0)
    observation_map: dict[str, str] = Field(default_factory=dict)
    serve: dict[str, Any] | None = None
    batching: BatchingOptions = Field(default_factory=BatchingOptions)
    server_resources: ServerResourceOptions = Field(default_factory=ServerResourceOptions)
    # The server's own environment (its dependencies need not agree with evalfleet's): `python` is an
    # interpreter or a venv folder that runs `python -m evalfleet.cli serve` (local and Ray); `image` is the
    # container image a cluster backend (OSMO) runs the server in.
    python: str | None = None
    image: str | None = None
    # A server evalfleet starts on a non-loopback address (OSMO, Ray) without api_key/api_key_env is refused
    # unless this says so: anyone who reaches its port may then use the policy.
    allow_unauthenticated: bool = False

    @field_validator("host")
    @classmethod
    def _no_credentials_in_host(cls, host: str) -> str:
        # A password in the host would be written into experiment.yaml and every log line that names the server.
        from evalfleet.secrets import carries_credentials

        if carries_credentials(host):
            raise ValueError("credentials in the host's URL are not accepted; give the host alone and the key as "
                             "api_key_env: VARIABLE (the environment variable that holds it)")
        return host


def with_api_key(options: RemoteClientOptions) -> RemoteClientOptions:
    """The options with `api_key` read from `api_key_env` when only the variable is named (at connect time:
    the variable exists where the client runs, not necessarily where the Experiment was loaded)."""
    from evalfleet.secrets import resolve

    key = resolve(options.api_key, options.api_key_env, key="policy.api_key")
    return options if key == options.api_key else options.model_copy(update={"api_key": key})
