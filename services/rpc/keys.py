"""Service keys: one Ed25519 key pair per role, the role bound to the key (SPEC §2, ADR 42).

A process signs its service credentials (EdDSA JWTs, RFC 8037) with its own
private key; the services hold only public keys and take the caller's role
from the key that verified the credential, found by the credential's ``kid``,
never from a claim. So the gateway's key cannot speak as the operator, nor a
worker's as the gateway.

Keys are files in one folder (``OPS_SERVICE_KEYS_DIR``, ``var/keys`` by
default): ``public/<name>.pub`` are the public keys the services trust, and
``<name>/<name>.key`` each private key (PKCS#8 PEM, 0600), in a folder of its
own so that a deployment can hand each process its folder and nothing else
(``compose.yaml`` mounts one volume per key). The name says the role:
``gateway``, ``operator``, or a role and a label (``worker-batch1``); a public
key named ``<name>.previous.pub`` is still trusted while a rotation is under
way. The ``kid`` is the key's RFC 7638 thumbprint, so it is the same
wherever the key is found.

A verifier reads the directory again when a second has passed since it last
did: a key issued to a new SDK worker (``opsctl keys issue``) is trusted
without a restart, and a deleted one is not, once the credentials it signed
have left the verified-credential cache (``credentials``, at most a minute).
A public key file it cannot use is skipped with a warning naming the file and
why, once per content of the file: not at each reading.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from durable_ops.model.scope import Role
from durable_ops.private_files import read_private_text, write_private_file
from durable_ops.settings import Settings, SettingsError

PRIVATE_SUFFIX = ".key"
PUBLIC_SUFFIX = ".pub"
PUBLIC_DIR = "public"
PREVIOUS = ".previous"
# A role, then optionally "-" and a label of the holder (an SDK worker's name).
_NAME = re.compile(r"(?P<role>[a-z]+)(?:-(?P<label>[a-z0-9][a-z0-9_-]{0,47}))?")
RESCAN_SECONDS = 1.0
log = structlog.get_logger(__name__)


def key_name(role: Role, label: str = "") -> str:
    """The file name stem of ``role``'s key, or of the key issued to ``label``."""
    name = f"{role.value}-{label}" if label else role.value
    if _role_of(name) is not role:
        raise SettingsError(
            f"{label!r} is not a key label: use 1-48 lowercase letters, digits, '-' or '_'"
        )
    return name


def _role_of(stem: str) -> Role | None:
    match = _NAME.fullmatch(stem)
    if match is None:
        return None
    try:
        return Role(match["role"])
    except ValueError:
        return None


def thumbprint(public_key: Ed25519PublicKey) -> str:
    """RFC 7638: the SHA-256 of the canonical JWK, base64url without padding."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    jwk = json.dumps(
        {"crv": "Ed25519", "kty": "OKP", "x": _b64(raw)}, separators=(",", ":"), sort_keys=True
    )
    return _b64(hashlib.sha256(jwk.encode()).digest())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass(frozen=True)
class SigningKey:
    """A process's own private key: who it is (``name``), as which role, under which ``kid``."""

    name: str
    role: Role
    kid: str
    private_key: Ed25519PrivateKey
    path: Path | None = None  # the file it was read from, for a message about it

    @classmethod
    def load(cls, path: Path) -> SigningKey:
        """The key in ``path`` (``<name>.key``); one that others may read is refused."""
        stem = path.name.removesuffix(PRIVATE_SUFFIX)
        role = _role_of(stem)
        if role is None or not path.name.endswith(PRIVATE_SUFFIX):
            raise SettingsError(f"{path} is not a service key: expected <role>[-<label>].key")
        pem = read_private_text(path).encode()  # outside the try: its refusal is a ValueError
        try:
            loaded = serialization.load_pem_private_key(pem, None)
        except ValueError as error:
            raise SettingsError(f"{path} is not a PEM Ed25519 private key") from error
        if not isinstance(loaded, Ed25519PrivateKey):
            raise SettingsError(f"{path} is not an Ed25519 key")
        return cls(stem, role, thumbprint(loaded.public_key()), loaded, path)


@dataclass(frozen=True)
class TrustedKey:
    name: str
    role: Role
    public_key: Ed25519PublicKey


def private_key_path(directory: Path, name: str) -> Path:
    return directory / name / f"{name}{PRIVATE_SUFFIX}"


def create_key_pair(directory: Path, name: str) -> Path:
    """Make ``name``'s private key and its public key in the keys folder ``directory``
    (both 0600); an existing key stays, so two processes making the same key at once
    both end up with the one that won. Answers the private key's path."""
    private_path = private_key_path(directory, name)
    if not private_path.exists():
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        write_private_file(private_path, pem)
    key = SigningKey.load(private_path).private_key
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    public_path = directory / PUBLIC_DIR / f"{name}{PUBLIC_SUFFIX}"
    if not public_path.exists() or public_path.read_bytes() != public_pem:
        write_private_file(public_path, public_pem, replace=True)
    return private_path


def ensure_role_keys(directory: Path, roles: Iterable[Role] = tuple(Role)) -> list[str]:
    """A key pair for each of ``roles`` in ``directory``, made where missing (``opsctl up``,
    ``opsctl keys init``); answers the names made."""
    names = [role.value for role in roles]
    missing = [name for name in names if not private_key_path(directory, name).exists()]
    for name in missing:
        create_key_pair(directory, name)
    return missing


def rotate(directory: Path, name: str) -> Path:
    """A new key for ``name``; its old public key stays trusted as ``<name>.previous.pub``
    (replacing an older previous one) until the operator deletes it."""
    public = directory / PUBLIC_DIR
    current = public / f"{name}{PUBLIC_SUFFIX}"
    if current.exists():
        current.replace(public / f"{name}{PREVIOUS}{PUBLIC_SUFFIX}")
    private_key_path(directory, name).unlink(missing_ok=True)
    return create_key_pair(directory, name)


@dataclass(frozen=True)
class SkippedKey:
    """A file of the public keys folder that holds no key the services can trust, and why
    (never its content)."""

    path: Path
    reason: str
    version: str = ""  # what changes when the file does: a digest of its bytes

    def __str__(self) -> str:
        return f"{self.path.name} ({self.reason})"


def scan_trusted(directory: Path) -> tuple[dict[str, TrustedKey], list[SkippedKey]]:
    """The public keys of the keys folder ``directory`` by ``kid``, and the ``.pub`` files
    in it that were skipped."""
    trusted: dict[str, TrustedKey] = {}
    skipped: list[SkippedKey] = []
    try:
        paths = sorted((directory / PUBLIC_DIR).glob(f"*{PUBLIC_SUFFIX}"))
    except OSError:
        return trusted, skipped
    for path in paths:
        stem = path.name.removesuffix(PUBLIC_SUFFIX).removesuffix(PREVIOUS)
        role = _role_of(stem)
        if role is None:
            skipped.append(SkippedKey(path, f"not named <role>[-<label>]{PUBLIC_SUFFIX}"))
            continue
        try:
            pem = path.read_bytes()
        except OSError as error:
            skipped.append(SkippedKey(path, f"unreadable: {error.strerror or error}"))
            continue
        version = hashlib.sha256(pem).hexdigest()
        try:
            public_key = serialization.load_pem_public_key(pem)
        except (ValueError, UnsupportedAlgorithm):
            private = b"PRIVATE KEY-----" in pem
            reason = "a private key, not a public one" if private else "not a PEM public key"
            skipped.append(SkippedKey(path, reason, version))
            continue
        if not isinstance(public_key, Ed25519PublicKey):
            kind = type(public_key).__name__.removesuffix("PublicKey")
            skipped.append(SkippedKey(path, f"{kind} key, not Ed25519", version))
            continue
        trusted[thumbprint(public_key)] = TrustedKey(stem, role, public_key)
    return trusted, skipped


# Each skipped file warned about, by path: the reason and version it was warned for.
_warned: dict[Path, tuple[str, str]] = {}
_warned_lock = threading.Lock()


def warn_skipped(directory: Path, skipped: Iterable[SkippedKey]) -> None:
    """A warning for each of ``skipped`` (from ``directory``) not warned about already as it
    is now; one skipped no longer is forgotten, so it is warned about again if it is again."""
    public = directory / PUBLIC_DIR
    now = {entry.path: (entry.reason, entry.version) for entry in skipped}
    with _warned_lock:
        for path in [path for path in _warned if path.parent == public and path not in now]:
            del _warned[path]
        fresh = [path for path, seen in now.items() if _warned.get(path) != seen]
        _warned.update((path, now[path]) for path in fresh)
    for path in fresh:
        log.warning("service_key_skipped", path=str(path), reason=now[path][0])


def read_trusted(directory: Path) -> dict[str, TrustedKey]:
    """The public keys of the keys folder ``directory`` by ``kid``; files that are not
    keys are skipped, with a warning (``warn_skipped``)."""
    trusted, skipped = scan_trusted(directory)
    warn_skipped(directory, skipped)
    return trusted


class TrustedKeys:
    """The public keys a service verifies with, read again at most once a second."""

    def __init__(
        self,
        directory: Path,
        *,
        clock: Callable[[], float] = time.monotonic,
        initial: Mapping[str, TrustedKey] | None = None,
    ) -> None:
        self.directory = directory
        self._clock = clock
        self._keys = dict(initial) if initial is not None else read_trusted(directory)
        self._read_at = clock()
        self._lock = threading.Lock()

    def find(self, kid: str) -> TrustedKey | None:
        if self._clock() - self._read_at >= RESCAN_SECONDS:
            with self._lock:
                if self._clock() - self._read_at >= RESCAN_SECONDS:
                    self._keys = read_trusted(self.directory)
                    self._read_at = self._clock()
        return self._keys.get(kid)


def own_key(settings: Settings, role: Role) -> SigningKey:
    """This process's key: ``OPS_SERVICE_KEY`` when set, else ``role``'s in the keys folder.
    A missing file is a ``SettingsError`` that says how to get one."""
    keys = Path(settings.service_keys_dir)
    path = (
        Path(settings.service_key) if settings.service_key else private_key_path(keys, role.value)
    )
    if settings.service_key and not path.is_file():
        raise SettingsError(f"no service key at {path} (OPS_SERVICE_KEY)")
    if not path.is_file():
        # `keys init ROLE` makes exactly this file; `keys issue` makes <role>-<label> keys,
        # and for workers and producers only.
        raise SettingsError(
            f"no service key at {path}: `opsctl up` makes one per role in"
            f" {settings.service_keys_dir}, and so does `opsctl keys init {role.value}`"
        )
    key = SigningKey.load(path)
    if key.role is not role:
        raise SettingsError(f"{path} is {_a(key.role)} key; this process needs {_a(role)} key")
    return key


def _a(role: Role) -> str:
    """The role with its article: "a gateway", "an operator"."""
    return f"{'an' if role.value[0] in 'aeiou' else 'a'} {role.value}"


def trusted_keys(settings: Settings) -> TrustedKeys:
    """The public keys in ``OPS_SERVICE_KEYS_DIR`` that this service verifies with; none at
    all is a ``SettingsError``: a service that trusts no key refuses every call, so it must
    not start (a relative folder read from another directory, say, or key files it cannot
    use: the message names them and why)."""
    directory = Path(settings.service_keys_dir)
    keys, skipped = scan_trusted(directory)
    if not keys and skipped:
        raise SettingsError(
            f"no usable public service keys in {directory.resolve() / PUBLIC_DIR}"
            " (OPS_SERVICE_KEYS_DIR), so every call would be refused; skipped:"
            f" {', '.join(map(str, skipped))}"
        )
    if not keys:
        public = directory.resolve() / PUBLIC_DIR
        raise SettingsError(
            f"no public service keys in {public} (OPS_SERVICE_KEYS_DIR), so every call would"
            " be refused: set OPS_SERVICE_KEYS_DIR to the folder that holds them (an absolute"
            " path), or make them there with `opsctl keys init`"
        )
    warn_skipped(directory, skipped)
    return TrustedKeys(directory, initial=keys)
