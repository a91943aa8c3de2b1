"""TLS for gRPC beyond loopback (SPEC §2, issue 35).

A server whose bind is not loopback serves TLS only, and a client whose
target is not loopback connects with TLS only: a plaintext call never leaves
the host. Loopback stays plaintext (nothing on the wire to protect, and the
embedded stack stays simple).

The material sits beside the service keys (``OPS_SERVICE_KEYS_DIR``), from a
local authority ``opsctl keys init`` keeps, or the operator's own files in
the same places:

- ``public/ca.pem``: the authority's certificate, what clients trust (with
  the public keys: every process may read it);
- ``tls/server.pem``, ``tls/server.key``: the services' certificate, for the
  names they are reached by (``localhost``, loopback, the Compose service
  names and any ``--tls-name``), and its key (0600);
- ``tls-ca/ca.key``: the authority's key (0600), needed only to issue again.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from durable_ops.model.addresses import first_listed_address, stays_on_this_host
from durable_ops.private_files import read_private_text, write_private_file
from durable_ops.settings import SettingsError

CA_CERT = Path("public") / "ca.pem"
CA_KEY = Path("tls-ca") / "ca.key"
SERVER_CERT = Path("tls") / "server.pem"
SERVER_KEY = Path("tls") / "server.key"
# The names the services answer to: this host, and each service's Compose name.
SERVICE_NAMES = ("localhost", "operations", "notifications", "ai-admission", "workspace")
LOOPBACK_IPS = ("127.0.0.1", "::1")
VALID_DAYS = 3650


def server_credentials(keys_dir: Path, bind: str) -> grpc.ServerCredentials | None:
    """TLS for a bind beyond loopback (None for loopback); missing files are a
    ``SettingsError`` that says how to get them."""
    if stays_on_this_host(bind):
        return None
    cert, key = keys_dir / SERVER_CERT, keys_dir / SERVER_KEY
    if not cert.is_file() or not key.is_file():
        raise SettingsError(
            f"{bind} is beyond loopback, so gRPC there is TLS only and needs {cert} and {key}:"
            f" `opsctl keys init` makes them (OPS_SERVICE_KEYS_DIR={keys_dir}), or put your own"
        )
    private_key = read_private_text(key).encode()
    return grpc.ssl_server_credentials([(private_key, cert.read_bytes())])


def channel_credentials(target: str, ca: Path | None) -> grpc.ChannelCredentials | None:
    """TLS for a target beyond loopback (None for loopback), trusting the certificate in
    ``ca`` when there is one (the local authority's), else the system's roots."""
    if stays_on_this_host(target):
        return None
    return grpc.ssl_channel_credentials(ca.read_bytes() if ca and ca.is_file() else None)


def checked_name_options(target: str, server_name: str = "") -> tuple[tuple[str, str], ...]:
    """The channel option that has TLS check the certificate for ``server_name`` (a replica
    reached by an address its name resolved to), else for the first address of a list
    target (``first_listed_address``); none where gRPC's own choice, the target's host,
    is right."""
    name = server_name or first_listed_address(target)
    return (("grpc.ssl_target_name_override", name),) if name else ()


def authority_of(keys_dir: str | Path) -> Path:
    """Where the local authority's certificate is, in a keys folder."""
    return Path(keys_dir) / CA_CERT


def ensure_tls(keys_dir: Path, extra_names: Iterable[str] = ()) -> bool:
    """Make the local authority and the services' certificate where missing; True when
    anything was made. A certificate made earlier is kept, whatever names it has."""
    if (keys_dir / SERVER_CERT).is_file() and (keys_dir / SERVER_KEY).is_file():
        return False
    ca_key, ca_cert = _authority(keys_dir)
    key = ec.generate_private_key(ec.SECP256R1())
    names = [*SERVICE_NAMES, *extra_names]
    alternative: list[x509.GeneralName] = [x509.DNSName(n) for n in names if not _is_ip(n)]
    alternative += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in LOOPBACK_IPS]
    alternative += [x509.IPAddress(ipaddress.ip_address(n)) for n in names if _is_ip(n)]
    cert = (
        _builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "durable-ops services")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .add_extension(x509.SubjectAlternativeName(alternative), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    write_private_file(keys_dir / SERVER_KEY, _pem_key(key))
    write_private_file(keys_dir / SERVER_CERT, cert.public_bytes(serialization.Encoding.PEM))
    return True


def _authority(keys_dir: Path) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key_path, cert_path = keys_dir / CA_KEY, keys_dir / CA_CERT
    if key_path.is_file() and cert_path.is_file():
        key = serialization.load_pem_private_key(read_private_text(key_path).encode(), None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise SettingsError(f"{key_path} is not the EC key of a durable-ops authority")
        return key, x509.load_pem_x509_certificate(cert_path.read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "durable-ops local authority")])
    cert = (
        _builder(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    write_private_file(key_path, _pem_key(key))
    write_private_file(cert_path, cert.public_bytes(serialization.Encoding.PEM), replace=True)
    return key, cert


def _builder(subject: x509.Name) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
    )


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
