"""The one way the server fetches a URL a request names (``--media-urls``): resolved once, refused for
loopback, private, link-local (the metadata server's), multicast and reserved addresses unless the
operator allows private ones, connected to the address that was checked (no second lookup), each
redirect checked the same way (http and https only, a few at most), the size and the total time
bounded. A refusal or a failure tells the client only that the URL could not be used; what was
found (an address, a port, a status) goes to the log, so the fetcher cannot be used as a scanner."""

from __future__ import annotations

import http.client
import ipaddress
import logging
import socket
import ssl
import time
import urllib.parse
from dataclasses import dataclass

log = logging.getLogger(__name__)

DEFAULT_PORTS = {"http": 80, "https": 443}
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True)
class FetchPolicy:
    max_bytes: int
    timeout_seconds: float = 10.0  # for the whole fetch, redirects included
    max_redirects: int = 3
    allow_private: bool = False  # loopback and private addresses too, never link-local (--media-urls-private)


class FetchRefused(Exception):
    """The URL was not fetched; the message is safe to show the client."""


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address, an IPv4-mapped IPv6 one as the IPv4 address it carries."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def public_address(address: str) -> bool:
    """Whether ``address`` is a global unicast address (not loopback, private, link-local,
    multicast, reserved or unspecified; IPv4-mapped IPv6 addresses are judged as IPv4)."""
    ip = _ip(address)
    return ip.is_global and not (ip.is_multicast or ip.is_reserved)


def private_address(address: str) -> bool:
    """Loopback or a private range: allowed with ``allow_private``. Link-local (the metadata server,
    169.254.169.254) never is."""
    ip = _ip(address)
    return (ip.is_loopback or ip.is_private) and not (ip.is_link_local or ip.is_multicast or ip.is_unspecified)


def _allowed_address(host: str, port: int, policy: FetchPolicy, deadline: float) -> str:
    """One address of ``host`` that the policy allows (the first one getaddrinfo gives)."""
    if time.monotonic() >= deadline:
        raise TimeoutError("out of time before the lookup")
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise OSError(f"cannot resolve {host!r}: {exc}") from None
    addresses = [str(item[4][0]) for item in found]
    for address in addresses:
        if public_address(address) or (policy.allow_private and private_address(address)):
            return address
    raise PermissionError(f"{host!r} resolves to no public address ({', '.join(sorted(set(addresses)))})")


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection to a checked address, whatever the host name resolves to by now."""

    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """The same under TLS: the certificate is checked against the host name, the socket goes to the address."""

    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        self._tls = ssl.create_default_context()
        super().__init__(host, port, timeout=timeout, context=self._tls)
        self._address = address

    def connect(self) -> None:
        raw = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._tls.wrap_socket(raw, server_hostname=self.host)


def _get(url: str, policy: FetchPolicy, deadline: float) -> tuple[int, str | None, bytes]:
    """One GET: (status, Location, body up to max_bytes + 1)."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        raise PermissionError(f"scheme {scheme!r} or no host")
    port = parts.port or DEFAULT_PORTS[scheme]
    address = _allowed_address(parts.hostname, port, policy, deadline)
    connection_type = _PinnedHTTPSConnection if scheme == "https" else _PinnedHTTPConnection
    connection = connection_type(parts.hostname, port, address, max(0.001, deadline - time.monotonic()))
    try:
        target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
        connection.request("GET", target, headers={"User-Agent": "vertex-llama", "Accept": "*/*"})
        response = connection.getresponse()
        if response.status in REDIRECT_STATUSES:
            return response.status, response.getheader("Location"), b""
        body = bytearray()
        while len(body) <= policy.max_bytes:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("out of time while reading")
            if connection.sock is not None:
                connection.sock.settimeout(remaining)
            chunk = response.read1(min(65536, policy.max_bytes + 1 - len(body)))
            if not chunk:
                break
            body += chunk
        return response.status, None, bytes(body)
    finally:
        connection.close()


def fetch(url: str, policy: FetchPolicy) -> bytes:
    """The body of ``url`` (a 200), following up to ``max_redirects`` checked redirects; FetchRefused
    (a message that names no address, port or status) for anything else."""
    deadline = time.monotonic() + policy.timeout_seconds
    current = url
    try:
        for _ in range(policy.max_redirects + 1):
            status, location, body = _get(current, policy, deadline)
            if location is not None:
                current = urllib.parse.urljoin(current, location)
                continue
            if status != 200:
                raise OSError(f"HTTP {status}")
            if len(body) > policy.max_bytes:
                raise FetchRefused(f"the media URL returned more than --media-max-bytes ({policy.max_bytes})")
            return body
        raise OSError(f"more than {policy.max_redirects} redirects")
    except FetchRefused:
        raise
    except (OSError, http.client.HTTPException, ValueError) as exc:  # PermissionError and TimeoutError included
        log.info("a media URL was not fetched: %s: %s", current, exc)
        reason = "it is not an allowed address" if isinstance(exc, PermissionError) else "it could not be fetched"
        raise FetchRefused(f"the media URL was not used: {reason} (the server's log says why)") from None
