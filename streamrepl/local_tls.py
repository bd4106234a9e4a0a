"""TLS for the embedded clusters of `streamrepl local up -tls`: a CA and a server certificate made with the
`openssl` command, and stunnel (Debian's stunnel4) terminating TLS in front of each broker.

The broker listens in plain TCP on loopback and advertises the TLS port, so that every connection a client makes
(the bootstrap one and those to the broker its metadata names) goes through stunnel. Only the CA certificate is
named in the registry (`ssl.ca.location`); its key stays in the state directory to issue server certificates.
"""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from .errors import InvalidArgument, Unreachable

#: In the state directory.
TLS_DIR = "tls"
CA_CERT = "ca.pem"
CA_KEY = "ca.key"
SERVER_CERT = "server.pem"
SERVER_KEY = "server.key"
#: Made before a server certificate is issued, removed once the running terminators were told to read it again: so a
#: `local up -tls` killed in between still has them told by the next one.
RELOAD_MARK = "reload-due"
#: A server certificate that expires within this is issued again by `local up -tls`.
RENEW_BEFORE = datetime.timedelta(days=1)
SERVER_DAYS = 825
CA_DAYS = 3650
#: The names the server certificate is for: every broker runs on loopback.
SERVER_NAMES = "IP:127.0.0.1,DNS:localhost"

_CA_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = streamrepl local CA
[ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
"""

_SIGN_CONFIG = """\
[ca]
default_ca = local
[local]
database = {work}/index.txt
new_certs_dir = {work}
serial = {work}/serial
default_md = sha256
policy = any
copy_extensions = none
x509_extensions = server
unique_subject = no
[any]
commonName = supplied
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = {names}
authorityKeyIdentifier = keyid
[req]
distinguished_name = dn
prompt = no
[dn]
CN = 127.0.0.1
"""


def tunnel_binary() -> str | None:
    """The stunnel program, or None when it is not installed."""
    return shutil.which("stunnel4") or shutil.which("stunnel")


def _openssl(args: list[str]) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise Unreachable("local up -tls needs the openssl command: install it (apt-get install openssl)")
    done = subprocess.run([exe, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise Unreachable(f"openssl {args[0]} failed making a certificate for local up -tls: {last}")


def _stamp(when: datetime.datetime) -> str:
    return when.astimezone(datetime.UTC).strftime("%Y%m%d%H%M%SZ")


def _nothing() -> None:
    pass


def make_ca(directory: Path, done: Callable[[], None] = _nothing) -> Path:
    """A new CA (key and self-signed certificate) in `directory`; returns the certificate's path. `done()` is called
    after the key and after the certificate is in place (the crash hook's steps).

    Made aside and moved in, the certificate last and taken away first (and the server certificate, which the new
    CA did not sign): where both files are there, they are a pair, also after a process killed in between."""
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory) as work:  # on the same file system: os.replace
        cnf = Path(work) / "ca.cnf"
        cnf.write_text(_CA_CONFIG)
        key, cert = Path(work) / CA_KEY, Path(work) / CA_CERT
        _openssl(
            ["req", "-x509", "-config", str(cnf), "-extensions", "ext", "-newkey", "ec"]
            + ["-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key), "-out", str(cert)]
            + ["-days", str(CA_DAYS)]
        )
        key.chmod(0o600)
        for stale in (CA_CERT, SERVER_CERT):
            (directory / stale).unlink(missing_ok=True)
        os.replace(key, directory / CA_KEY)
        done()
        os.replace(cert, directory / CA_CERT)
        done()
    return directory / CA_CERT


def issue_server(
    directory: Path,
    not_before: datetime.datetime | None = None,
    not_after: datetime.datetime | None = None,
    done: Callable[[], None] = _nothing,
) -> Path:
    """A new server key and certificate for loopback in `directory`, signed by its CA, valid from `not_before` (now)
    to `not_after` (SERVER_DAYS from now); returns the certificate's path. Written in place of the old ones only when
    complete, the certificate last and taken away first (where both are there, they are a pair, as in make_ca): a
    running stunnel reads them again on SIGHUP."""
    now = datetime.datetime.now(datetime.UTC)
    start = not_before or now - datetime.timedelta(minutes=5)
    end = not_after or now + datetime.timedelta(days=SERVER_DAYS)
    with tempfile.TemporaryDirectory(dir=directory) as work:
        w = Path(work)
        cnf = w / "sign.cnf"
        cnf.write_text(_SIGN_CONFIG.format(work=work, names=SERVER_NAMES))
        (w / "index.txt").write_text("")
        (w / "serial").write_text(os.urandom(8).hex().upper() + "\n")
        key, csr, cert = w / SERVER_KEY, w / "server.csr", w / SERVER_CERT
        _openssl(
            ["req", "-new", "-config", str(cnf), "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
            + ["-nodes", "-keyout", str(key), "-out", str(csr)]
        )
        _openssl(
            ["ca", "-config", str(cnf), "-batch", "-notext", "-in", str(csr), "-out", str(cert)]
            + ["-cert", str(directory / CA_CERT), "-keyfile", str(directory / CA_KEY)]
            + ["-startdate", _stamp(start), "-enddate", _stamp(end)]
        )
        key.chmod(0o600)
        (directory / SERVER_CERT).unlink(missing_ok=True)
        os.replace(key, directory / SERVER_KEY)
        done()
        os.replace(cert, directory / SERVER_CERT)
        done()
    return directory / SERVER_CERT


def _expires_soon(cert: Path) -> bool:
    exe = shutil.which("openssl") or "openssl"
    seconds = str(int(RENEW_BEFORE.total_seconds()))
    done = subprocess.run([exe, "x509", "-checkend", seconds, "-noout", "-in", str(cert)], capture_output=True)
    return done.returncode != 0


def ensure(state_dir: Path, done: Callable[[], None] = _nothing) -> bool:
    """Make the state directory's TLS files when missing (a server certificate also when it expires within
    RENEW_BEFORE); True when a server certificate was made. A CA made earlier is kept: registries and clients name
    it."""
    if tunnel_binary() is None:
        raise Unreachable("local up -tls needs stunnel: install it (apt-get install stunnel4)")
    directory = state_dir / TLS_DIR
    if not ((directory / CA_CERT).is_file() and (directory / CA_KEY).is_file()):
        make_ca(directory, done)
    cert = directory / SERVER_CERT
    if not (cert.is_file() and (directory / SERVER_KEY).is_file()) or _expires_soon(cert):
        (directory / RELOAD_MARK).touch()
        issue_server(directory, done=done)
        return True
    return False


def reload_due(state_dir: Path) -> bool:
    """A server certificate was made that the terminators running before it may not have read yet."""
    return (state_dir / TLS_DIR / RELOAD_MARK).exists()


def reload_done(state_dir: Path) -> None:
    (state_dir / TLS_DIR / RELOAD_MARK).unlink(missing_ok=True)


def tunnel_command(state_dir: Path, cluster: str, tls_port: int, port: int) -> list[str]:
    """The argv of a stunnel in the foreground taking TLS on `tls_port` to the broker on `port`, its configuration
    written into the state directory."""
    exe = tunnel_binary()
    if exe is None:
        raise Unreachable("local up -tls needs stunnel: install it (apt-get install stunnel4)")
    directory = state_dir / TLS_DIR
    conf = directory / f"{cluster}.stunnel.conf"
    conf.write_text(
        "foreground = yes\n"
        "pid =\n"
        "debug = notice\n"
        f"[{cluster}]\n"
        f"accept = 127.0.0.1:{tls_port}\n"
        f"connect = 127.0.0.1:{port}\n"
        f"cert = {directory / SERVER_CERT}\n"
        f"key = {directory / SERVER_KEY}\n"
    )
    return [exe, str(conf)]


def runs(args: list[bytes], state_dir: Path, cluster: str) -> bool:
    """True when a process with this command line is the stunnel of `cluster` in `state_dir`."""
    conf = str(Path(state_dir) / TLS_DIR / f"{cluster}.stunnel.conf").encode()
    return len(args) >= 2 and b"stunnel" in Path(args[0].decode(errors="replace")).name.encode() and args[1] == conf


def check_broker(name: str) -> None:
    """TLS is put in front of Tansu only: noida-db advertises the port it binds, which stunnel would have to take."""
    if name != "tansu":
        raise InvalidArgument(
            f"local up -tls runs on tansu only ({name} advertises the port it listens on, so clients would"
            " bypass TLS); use -broker tansu"
        )
