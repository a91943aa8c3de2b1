"""Settings, read once from ``OPS_*`` environment variables.

What an operator sets (addresses, the database, secrets, retention, limits,
logging) lives here so the README table and the code cannot drift apart:
``tests/unit/test_settings.py`` checks that each field has a row in the README's
table with this default and, word for word, this description. A value
no operator needs to set is not a setting: the Operations server's timing is
``durable_ops.operations.tuning`` (ADR 0034).
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_SQLITE_PATH = Path("var") / "durable-ops.sqlite3"
DEFAULT_TOMBSTONE_RETENTION_DAYS = 400
# Settings import nothing of the product: a bound the product keeps elsewhere is repeated
# here, and tests/unit/test_settings.py checks that the two agree.
RETENTION_DAYS_MAX = 3660  # bounds.OLDER_THAN_MAX
WORKER_LEASE_SECONDS_RANGE = (5, 600)  # bounds.LEASE_SECONDS_RANGE, what a claim may ask for
MODEL_NAME_MAX = 128  # bounds.MODEL_MAX, the provenance column a model's name is stored in
# 0: follow the local server's slot count (concurrency.FOLLOW_SERVER_SLOTS); 64 is far
# above any slot count a single model server on one host offers.
WORKER_CONCURRENCY_RANGE = (0, 64)
# A second to a day: quicker is a request a tab sends without need, and a browser's timer
# fires at once for a delay beyond 2**31 - 1 ms.
UI_UNREAD_POLL_MS_RANGE = (1000, 86_400_000)
LOG_LEVELS = ("debug", "info", "warning", "error")  # what OPS_LOG_LEVEL may name, in any case
# Published in the README and here, so anyone can sign user tokens with it.
DEFAULT_JWT_SECRET = "dev-insecure-jwt-secret-change-me"  # noqa: S105 - public by design
# RFC 7518 §3.2: an HS256 key at least as long as the hash's output.
JWT_SECRET_MIN_BYTES = 32


class SettingsError(ValueError):
    """An ``OPS_*`` variable holds a value that cannot be used."""


def variable(setting: str) -> str:
    """The environment variable of a setting: ``operations_bind`` → ``OPS_OPERATIONS_BIND``."""
    return f"OPS_{setting.upper()}"


def service_variable(service: str, kind: str) -> str:
    """A served target's variable: ``("ai-admission", "bind")`` → ``OPS_AI_ADMISSION_BIND``."""
    return variable(f"{service.replace('-', '_')}_{kind}")


def _bool(name: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise SettingsError(f"{variable(name)} must be true or false, not {raw!r}")


def _int(name: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError as exc:
        raise SettingsError(f"{variable(name)} must be an integer, not {raw!r}") from exc


def _float(name: str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError as exc:
        raise SettingsError(f"{variable(name)} must be a number, not {raw!r}") from exc


_SECONDS_OR_ZERO = "a number of seconds, 0 or more"
_SECONDS = "a number of seconds above 0"


def _within(
    setting: str,
    value: float,
    low: float,
    high: float = math.inf,
    *,
    above: bool = False,
    rule: str = "",
) -> None:
    """Refuse ``value`` below ``low`` (with ``above``, at it too), above ``high``, and NaN or
    infinity, naming the variable; ``rule`` says the range in the setting's own words."""
    inside = low < value if above else low <= value
    if not (inside and value <= high and math.isfinite(value)):
        if not rule:
            rule = f"at least {low}" if high == math.inf else f"between {low} and {high}"
        raise SettingsError(f"{variable(setting)} must be {rule}, not {value!r}")


def _model_url(setting: str, url: str) -> None:
    """A model server's base URL: what the AI worker's client can call."""
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        raise SettingsError(
            f"{variable(setting)} must be an http or https URL (e.g. http://127.0.0.1:8081/v1),"
            f" not {url!r}"
        )


def _model_name(setting: str, name: str, *, needed_by: str = "") -> None:
    """A model's name, as the provenance of each result stores it."""
    if not 1 <= len(name) <= MODEL_NAME_MAX:
        when = f" when {variable(needed_by)} is set" if needed_by else ""
        raise SettingsError(
            f"{variable(setting)} must be 1 to {MODEL_NAME_MAX} characters{when}, not {name!r}"
        )


def _doc(text: str) -> dict[str, str]:
    return {"doc": text}


@dataclass(frozen=True)
class Settings:
    """Process configuration. Field ``x`` is read from ``OPS_X``."""

    database_url: str = field(
        default=f"sqlite:///{DEFAULT_SQLITE_PATH}",
        metadata=_doc("SQLAlchemy URL; MariaDB as `mysql+pymysql://user:pw@host/db`"),
    )
    database_wait_seconds: float = field(
        default=60.0,
        metadata=_doc(
            "how long a gRPC service waits at start for its database to answer (health"
            " NOT_SERVING meanwhile, one log line per attempt) before it exits with code 4;"
            " 0 asks once"
        ),
    )
    jwt_secret: str = field(
        default=DEFAULT_JWT_SECRET,
        repr=False,
        metadata=_doc(
            "HS256 secret for user JWTs, at least 32 bytes; when unset, `opsctl` keeps a"
            " generated one in `var/secrets.json`; set to this default or anything shorter, the"
            " gateway, `opsctl up` and `opsctl token` refuse it (exit 2)"
        ),
    )
    jwt_previous_secrets: str = field(
        default="",
        repr=False,
        metadata=_doc(
            "comma-separated earlier JWT secrets still accepted, so a rotation signs nobody out"
        ),
    )
    jwt_issuer: str = field(default="", metadata=_doc("when set, user JWTs must carry this `iss`"))
    jwt_audience: str = field(
        default="", metadata=_doc("when set, user JWTs must carry this `aud`")
    )
    service_keys_dir: str = field(
        default="var/keys",
        metadata=_doc(
            "the folder of service keys: the public keys (`<role>[-<label>].pub`) the services"
            " trust, and the private keys `opsctl up` gives each process"
        ),
    )
    service_key: str = field(
        default="",
        metadata=_doc(
            "this process's private service key (`<role>[-<label>].key`, mode 0600); default:"
            " its role's key in OPS_SERVICE_KEYS_DIR"
        ),
    )
    service_credential_max_age_seconds: int = field(
        default=86400,
        metadata=_doc(
            "the longest life of a service credential: one minted for longer, or issued"
            " longer ago (its `iat`), is refused whatever its `exp`"
        ),
    )
    dev_login: bool = field(
        default=False,
        metadata=_doc(
            "enables `POST /auth/dev-login` (a form on the sign-in page: sign in as anyone),"
            " served only while OPS_GATEWAY_BIND is loopback; never in production"
        ),
    )
    gateway_bind: str = field(default="127.0.0.1:8080", metadata=_doc("gateway HTTP address"))
    gateway_url: str = field(
        default="",
        metadata=_doc(
            "where `opsctl status` asks the gateway's `/readyz` when `--gateway-url` is not"
            " given; empty: the running `opsctl up`'s, else OPS_GATEWAY_BIND's (Compose's"
            " tools container names the gateway's container)"
        ),
    )
    gateway_allowed_hosts: str = field(
        default="",
        metadata=_doc(
            "comma-separated host names (no port; IPv6 as `[::1]`) the gateway answers to:"
            " a request with any other `Host` gets 400 `host_not_allowed`; empty:"
            " `localhost,127.0.0.1,[::1]` and the host of OPS_GATEWAY_BIND unless it is a"
            " wildcard"
        ),
    )
    gateway_trusted_proxies: str = field(
        default="",
        metadata=_doc(
            "comma-separated IP addresses or CIDRs of the proxies in front of the gateway:"
            " only their `X-Forwarded-Proto`/`X-Forwarded-For` are believed (then the"
            " session cookie is `Secure` behind a TLS proxy); empty: nobody's"
        ),
    )
    gateway_long_polls_per_user: int = field(
        default=16,
        metadata=_doc(
            "long-polls and event streams (`GET /api/operations/{id}:wait`, `GET /api/events`)"
            " one user may hold open at once, counted per gateway process: one more gets 429"
            " `too_many_waits` with `Retry-After`"
        ),
    )
    operations_bind: str = field(
        default="127.0.0.1:50051", metadata=_doc("Operations gRPC listen address")
    )
    notifications_bind: str = field(
        default="127.0.0.1:50052", metadata=_doc("Notifications gRPC listen address")
    )
    ai_admission_bind: str = field(
        default="127.0.0.1:50053", metadata=_doc("AI Admission gRPC listen address")
    )
    workspace_bind: str = field(
        default="127.0.0.1:50054", metadata=_doc("Workspace gRPC listen address")
    )
    dev_model_bind: str = field(
        default="127.0.0.1:8090", metadata=_doc("development model HTTP address")
    )
    dev_model_seconds: float = field(
        default=0.0,
        metadata=_doc(
            "how long the development model takes per answer, streamed over that time"
            " (`opsctl up` uses 4 unless set)"
        ),
    )
    operations_target: str = field(
        default="127.0.0.1:50051", metadata=_doc("where clients reach the Operations service")
    )
    notifications_target: str = field(
        default="127.0.0.1:50052", metadata=_doc("where clients reach the Notifications service")
    )
    ai_admission_target: str = field(
        default="127.0.0.1:50053", metadata=_doc("where clients reach the AI Admission service")
    )
    workspace_target: str = field(
        default="127.0.0.1:50054", metadata=_doc("where clients reach the Workspace service")
    )
    retention_days: int = field(
        default=0,
        metadata=_doc(
            "when above 0, the Operations process prunes terminal operations finished more"
            " than this many days ago, at start and then hourly, keeping an idempotency"
            " tombstone of each (ADR 0021)"
        ),
    )
    tombstone_retention_days: int = field(
        default=DEFAULT_TOMBSTONE_RETENTION_DAYS,
        metadata=_doc(
            "how many days after it finished a pruned operation's key is still refused;"
            " at least OPS_RETENTION_DAYS (also the default of `opsctl operations prune`)"
        ),
    )
    ai_user_limit: int = field(
        default=2,
        metadata=_doc(
            "active AI operations allowed per user (one scheduled for later counts from its time)"
        ),
    )
    ai_global_limit: int = field(
        default=20,
        metadata=_doc(
            "active AI operations allowed in total (one scheduled for later counts from its time)"
        ),
    )
    ai_global_daily_tokens: int = field(
        default=0,
        metadata=_doc(
            "model tokens all users together may spend per UTC day; 0: no global budget"
            " (each user's own daily budget still holds, ADR 0041)"
        ),
    )
    workers_ai_operations_enabled: bool = field(
        default=False, metadata=_doc("the AI worker claims work only when true")
    )
    worker_concurrency: int = field(
        default=0,
        metadata=_doc(
            "inferences one AI worker runs at once, 1 to 64 (answers per minute against each"
            " answer's speed); 0 (the default, decided by PROD-003): the local model server's slot"
            " count read at start-up (llama-server /props), at most 4, 1 when it does not say"
            " or with a host store (ADR 0044)"
        ),
    )
    worker_poll_seconds: float = field(
        default=0.5,
        metadata=_doc(
            "how often the AI worker, at start and before it claims, asks again whether an"
            " attempt its host journal left open is over (a claim the service refused is"
            " retried after 0.5 s, not this)"
        ),
    )
    worker_lease_seconds: int = field(
        default=60, metadata=_doc("lease the AI worker asks for on each claim, 5 to 600 seconds")
    )
    worker_task_timeout_seconds: float = field(
        default=120.0,
        metadata=_doc(
            "longest the model may go without progress (a prompt-reading report or an answer"
            " piece) before the inference fails model_timeout"
        ),
    )
    gateway_metrics_bind: str = field(
        default="",
        metadata=_doc(
            "when set (host:port), the gateway serves Prometheus `/metrics` there, never on"
            " OPS_GATEWAY_BIND (where users are)"
        ),
    )
    worker_metrics_bind: str = field(
        default="",
        metadata=_doc("when set (host:port), the AI worker serves Prometheus `/metrics` there"),
    )
    operations_metrics_bind: str = field(
        default="",
        metadata=_doc(
            "when set (host:port), the Operations service serves Prometheus `/metrics` there"
        ),
    )
    notifications_metrics_bind: str = field(
        default="",
        metadata=_doc("when set (host:port), the Notifications service serves `/metrics` there"),
    )
    workspace_metrics_bind: str = field(
        default="",
        metadata=_doc("when set (host:port), the Workspace service serves `/metrics` there"),
    )
    ai_admission_metrics_bind: str = field(
        default="",
        metadata=_doc("when set (host:port), the AI Admission service serves `/metrics` there"),
    )
    host_store_dir: str = field(
        default="", metadata=_doc("host operation store directory the AI worker locks (0700)")
    )
    host_id: str = field(default="", metadata=_doc("host identity; defaults to the hostname"))
    ai_local_url: str = field(
        default="http://127.0.0.1:8090/v1", metadata=_doc("OpenAI-compatible local model base URL")
    )
    ai_local_model: str = field(default="dev-heuristic", metadata=_doc("local model name"))
    ai_external_url: str = field(
        default="", metadata=_doc("OpenAI-compatible external base URL; empty disables it")
    )
    ai_external_model: str = field(default="", metadata=_doc("external model name"))
    ai_external_api_key: str = field(
        default="", repr=False, metadata=_doc("external route bearer key")
    )
    ai_circuit_failures: int = field(
        default=3, metadata=_doc("consecutive local failures that open the circuit")
    )
    ai_circuit_cooldown_seconds: float = field(
        default=30.0, metadata=_doc("seconds before an open circuit half-opens")
    )
    log_level: str = field(default="info", metadata=_doc("debug, info, warning or error"))
    log_json: str = field(
        default="auto", metadata=_doc("`auto` (JSON unless on a TTY), `true` or `false`")
    )
    ui_unread_poll_ms: int = field(
        default=60000,
        metadata=_doc(
            "bell unread-count poll interval in the web UI, 1000 (a second) to 86400000 (a day)"
        ),
    )

    def __post_init__(self) -> None:
        """Refuse what any process would refuse, each with one line naming its variable:
        here, every process checks them all, so ``opsctl up`` refuses a value before any
        child runs rather than watching the child that needs it exit again and again."""
        self._check_numbers()
        self._check_ai_worker()
        _host_names(self.gateway_allowed_hosts)
        _networks(self.gateway_trusted_proxies)
        if self.log_level.strip().lower() not in LOG_LEVELS:
            raise SettingsError(
                f"OPS_LOG_LEVEL must be debug, info, warning or error, not {self.log_level!r}"
            )

    def _check_numbers(self) -> None:
        """Each number within the range that makes sense for it (never NaN nor infinity)."""
        _within("database_wait_seconds", self.database_wait_seconds, 0, rule=_SECONDS_OR_ZERO)
        _within("service_credential_max_age_seconds", self.service_credential_max_age_seconds, 1)
        _within("gateway_long_polls_per_user", self.gateway_long_polls_per_user, 1)
        _within("dev_model_seconds", self.dev_model_seconds, 0, rule=_SECONDS_OR_ZERO)
        _within("retention_days", self.retention_days, 0, rule="0 (off) or a number of days")
        if not max(1, self.retention_days) <= self.tombstone_retention_days <= RETENTION_DAYS_MAX:
            raise SettingsError(
                "OPS_TOMBSTONE_RETENTION_DAYS must be at least 1 and at least OPS_RETENTION_DAYS,"
                f" and at most {RETENTION_DAYS_MAX}"
            )
        _within("ai_user_limit", self.ai_user_limit, 1)
        _within("ai_global_limit", self.ai_global_limit, 1)
        _within(
            "ai_global_daily_tokens",
            self.ai_global_daily_tokens,
            0,
            rule="0 (none) or a number of tokens",
        )
        _within("worker_concurrency", self.worker_concurrency, *WORKER_CONCURRENCY_RANGE)
        _within("worker_poll_seconds", self.worker_poll_seconds, 0, above=True, rule=_SECONDS)
        _within("worker_lease_seconds", self.worker_lease_seconds, *WORKER_LEASE_SECONDS_RANGE)
        _within(
            "worker_task_timeout_seconds",
            self.worker_task_timeout_seconds,
            0,
            above=True,
            rule=_SECONDS,
        )
        _within("ai_circuit_failures", self.ai_circuit_failures, 1)
        _within(
            "ai_circuit_cooldown_seconds",
            self.ai_circuit_cooldown_seconds,
            0,
            rule=_SECONDS_OR_ZERO,
        )
        _within("ui_unread_poll_ms", self.ui_unread_poll_ms, *UI_UNREAD_POLL_MS_RANGE)

    def _check_ai_worker(self) -> None:
        """What the AI worker's model routes and host store need."""
        if self.host_store_dir and self.worker_concurrency > 1:
            # The host store admits one unfinished operation at a time: one inference per host.
            raise SettingsError(
                "OPS_HOST_STORE_DIR needs OPS_WORKER_CONCURRENCY 1 or 0 (the default),"
                f" not {self.worker_concurrency}: a host store runs one inference at a time"
            )
        _model_url("ai_local_url", self.ai_local_url)
        _model_name("ai_local_model", self.ai_local_model)
        if self.ai_external_url:
            _model_url("ai_external_url", self.ai_external_url)
            _model_name("ai_external_model", self.ai_external_model, needed_by="ai_external_url")

    @property
    def gateway_allowed_host_names(self) -> list[str]:
        """OPS_GATEWAY_ALLOWED_HOSTS as ``Host`` names are spelt: lower case, IPv6 bracketed."""
        return _host_names(self.gateway_allowed_hosts)

    @property
    def gateway_trusted_proxy_networks(self) -> list[str]:
        """OPS_GATEWAY_TRUSTED_PROXIES, each a network in canonical form (``10.0.0.7/32``)."""
        return _networks(self.gateway_trusted_proxies)

    @property
    def jwt_verification_secrets(self) -> list[str]:
        """The secret tokens are signed with, then the earlier ones still accepted."""
        previous = [secret.strip() for secret in self.jwt_previous_secrets.split(",")]
        return [self.jwt_secret, *(secret for secret in previous if secret)]

    def check_user_token_secrets(self) -> None:
        """Refuse a user-token secret others can know or guess: the published default, or
        one shorter than HS256 needs, earlier ones included (a forger needs only one the
        gateway accepts). Only for what signs or checks user tokens: the other processes
        never read it, and ``opsctl`` generates a proper one when none is set."""
        named = [("jwt_secret", self.jwt_secret)]
        named += [("jwt_previous_secrets", secret) for secret in self.jwt_verification_secrets[1:]]
        for setting, secret in named:
            if secret == DEFAULT_JWT_SECRET:
                problem = "holds the published default, with which anyone can sign in as anyone"
            elif len(secret.encode()) < JWT_SECRET_MIN_BYTES:
                problem = (
                    f"holds a secret of {len(secret.encode())} bytes; HS256 needs at least"
                    f" {JWT_SECRET_MIN_BYTES} (RFC 7518 §3.2)"
                )
            else:
                continue
            remedy = (
                "set a random one (`openssl rand -base64 32`), or leave it unset for the one"
                " `opsctl` keeps in var/secrets.json"
                if setting == "jwt_secret"
                else "remove it (tokens signed with it can be forged)"
            )
            raise SettingsError(f"{variable(setting)} {problem}: {remedy}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = env.get(variable(f.name))
            if raw is None:
                continue
            if f.type == "bool":
                values[f.name] = _bool(f.name, raw)
            elif f.type == "int":
                values[f.name] = _int(f.name, raw)
            elif f.type == "float":
                values[f.name] = _float(f.name, raw)
            else:
                values[f.name] = raw
        return cls(**values)  # type: ignore[arg-type]


def _entries(raw: str) -> list[str]:
    return [entry.strip() for entry in raw.split(",") if entry.strip()]


def _host_names(raw: str) -> list[str]:
    names = []
    for entry in _entries(raw.lower()):
        with contextlib.suppress(ValueError):  # a bare IPv6 address: spelt as in a Host header
            entry = f"[{ipaddress.IPv6Address(entry)}]"
        bracketed = entry.startswith("[") and entry.endswith("]")
        if "*" in entry or "/" in entry or " " in entry or (":" in entry and not bracketed):
            raise SettingsError(
                "OPS_GATEWAY_ALLOWED_HOSTS must list host names without a port, scheme or"
                f" wildcard (e.g. `ops.example.com,localhost`), not {entry!r}"
            )
        names.append(entry)
    return names


def _networks(raw: str) -> list[str]:
    try:
        # Not strict: ``10.0.0.7/8`` means the network 10.0.0.0/8, as it reads.
        return [str(ipaddress.ip_network(entry, strict=False)) for entry in _entries(raw)]
    except ValueError as exc:
        raise SettingsError(
            "OPS_GATEWAY_TRUSTED_PROXIES must list IP addresses or CIDRs"
            f" (e.g. `172.18.0.0/16`): {exc}"
        ) from None


def documented_variables() -> list[tuple[str, str, str]]:
    """(variable, default, description) for every setting, for the README."""
    return [(variable(f.name), str(f.default), f.metadata.get("doc", "")) for f in fields(Settings)]
