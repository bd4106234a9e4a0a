"""Why a cluster registered with TLS does not answer, when the reason is TLS itself.

librdkafka tells a failed certificate check only in its log (the error a request ends with is a transport failure,
"does not answer"), so when a cluster with security.protocol SSL or SASL_SSL does not answer, one TLS handshake is
made here, with the registry's CA and checks as librdkafka makes them, and its failure named.
"""

from __future__ import annotations

import os
import socket
import ssl

from ..registry import Cluster

HANDSHAKE_TIMEOUT = 3.0


def _address(bootstrap: str) -> tuple[str, int] | None:
    first = bootstrap.split(",")[0].strip()
    first = first.split("://", 1)[-1].rsplit("@", 1)[-1]  # a scheme and user:password@ are not the address
    host, _, port = first.rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        return None


def tls_context(cluster: Cluster) -> ssl.SSLContext | None:
    """A client TLS context with the registry's CA, checks and client certificate, as librdkafka makes them (None when
    they cannot be loaded)."""
    props = cluster.properties
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    verify = props.get("enable.ssl.certificate.verification", "true").lower() not in ("false", "0")
    ctx.check_hostname = verify and props.get("ssl.endpoint.identification.algorithm", "https").lower() == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    try:
        location = props.get("ssl.ca.location", "")
        if props.get("ssl.ca.pem"):
            ctx.load_verify_locations(cadata=props["ssl.ca.pem"])
        elif location and location != "probe":
            if os.path.isdir(location):
                ctx.load_verify_locations(capath=location)
            else:
                ctx.load_verify_locations(location)
        else:
            ctx.load_default_certs()
        if props.get("ssl.certificate.location") and props.get("ssl.key.location"):
            # A broker that asks for the client's certificate gets it, as from librdkafka.
            ctx.load_cert_chain(
                props["ssl.certificate.location"], props["ssl.key.location"], props.get("ssl.key.password")
            )
    except (OSError, ssl.SSLError, ValueError):
        return None  # a CA librdkafka could not load either: it says so when the client is made
    return ctx


def tls_problem(cluster: Cluster, timeout: float = HANDSHAKE_TIMEOUT) -> str:
    """What fails in a TLS handshake with the cluster's first bootstrap broker ("" when it succeeds, when the cluster
    has no TLS, or when the broker does not answer at all)."""
    if not cluster.uses_tls():
        return ""
    address = _address(cluster.bootstrap)
    ctx = tls_context(cluster)
    if address is None or ctx is None:
        return ""
    host, port = address
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            with ctx.wrap_socket(raw, server_hostname=host):
                return ""
    except ssl.SSLCertVerificationError as e:
        return (
            f"its certificate fails the check ({e.verify_message}); check the registry's ssl.ca.location (the CA"
            " that signed the brokers' certificates) and the certificate's dates and names"
        )
    except ssl.SSLError as e:
        reason = e.reason or e.strerror or type(e).__name__
        return (
            f"the TLS handshake with it failed ({reason.replace('_', ' ').lower()}); check that it takes TLS"
            " on that port, and the registry's security.protocol"
        )
    except OSError:
        return ""
