"""Certificates made by tests: a CA that signs server and client certificates (PEM files)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))  # fmt: skip
    return path


class CertificateAuthority:
    """A CA of its own, in ``directory``; its certificate is :attr:`cert_file`."""

    def __init__(self, directory: Path, name: str = "goka-test-ca") -> None:
        self.directory, self.name = directory, name
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        self._cert = (
            x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
            .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
        )  # fmt: skip
        self.cert_file = directory / f"{name}.pem"
        self.cert_file.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, common_name: str, *, server: bool) -> tuple[Path, Path]:
        """A certificate for ``localhost`` (server) or a client; return (cert, key) files."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder().subject_name(_name(common_name))
            .issuer_name(self._cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )  # fmt: skip
        if server:
            names = x509.SubjectAlternativeName([x509.DNSName("localhost")])
            builder = builder.add_extension(names, critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        cert_file = self.directory / f"{self.name}-{common_name}.pem"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cert_file, _write_key(key, self.directory / f"{self.name}-{common_name}.key")
