"""The certificates of the mesh's mutual TLS: a CA and one certificate per proxy identity, made with
openssl where the target keeps its private files, never recorded.

EC P-256 (Istio's CA defaults to RSA 2048; ECDSA is its opt-in), a SPIFFE URI SAN as Istio gives a
workload (`shapes.spiffe_id`) and a DNS SAN for HAProxy's verifyhost, valid a day.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ...base.errors import TargetError
from .shapes import spiffe_id

OPENSSL_TIMEOUT_S = 60


def _openssl(argv: list[str], what: str) -> None:
    try:
        proc = subprocess.run(["openssl", *argv], capture_output=True, text=True, timeout=OPENSSL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TargetError(f"openssl: {what}: {exc}") from None
    if proc.returncode != 0:
        raise TargetError(f"openssl: {what} failed: {proc.stderr.strip()[-500:]}")


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to a file that is mode 0600 from its creation (a key is never readable by others)."""
    path.unlink(missing_ok=True)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(text)


def make_certificates(tls_dir: Path, identities: list[str]) -> None:
    """A CA and one certificate per identity, as PEM files in ``tls_dir`` (mode 700).

    ``<identity>.crt`` and ``.key`` as Envoy reads them; ``<identity>.pem`` holds both, as HAProxy does."""
    tls_dir.mkdir(mode=0o700, exist_ok=True)
    tls_dir.chmod(0o700)
    ca_key, ca_crt = tls_dir / "ca.key", tls_dir / "ca.crt"
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        ["req", "-x509", *ec, "-keyout", str(ca_key), "-out", str(ca_crt), "-days", "1", "-subj", "/CN=benchlib CA"],
        "the CA",
    )
    for name in identities:
        key, csr, crt = (tls_dir / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
        _openssl(["req", *ec, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}"], f"{name}'s key")
        ext = tls_dir / f"{name}.ext"
        # the DNS name for HAProxy's verifyhost, the SPIFFE URI for Envoy's SAN match
        ext.write_text(f"subjectAltName=DNS:{name},URI:{spiffe_id(name)}\nextendedKeyUsage=serverAuth,clientAuth\n")
        _openssl(
            [
                "x509",
                "-req",
                "-in",
                str(csr),
                "-CA",
                str(ca_crt),
                "-CAkey",
                str(ca_key),
                "-CAcreateserial",
                "-days",
                "1",
                "-extfile",
                str(ext),
                "-out",
                str(crt),
            ],
            f"{name}'s certificate",
        )
        write_private(tls_dir / f"{name}.pem", crt.read_text() + key.read_text())
        for p in (csr, ext):
            p.unlink()
