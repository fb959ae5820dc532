"""Whether a host is this machine: what decides where the agent's servers may bind and whom they answer.

``serve``, the embedded model server and the embed client all ask it, so
they agree on what "loopback" means: an address in 127.0.0.0/8 or ::1, or
a ``localhost`` name that resolves to nothing else. Any other name counts
as another machine, whatever it resolves to today.
"""

from __future__ import annotations

import ipaddress
import socket


def is_loopback(host: str) -> bool:
    """True when every address ``host`` names is a loopback address (127.0.0.0/8, ::1)."""
    literal = host.strip("[]")
    try:
        return ipaddress.ip_address(literal).is_loopback
    except ValueError:
        pass
    if not literal or literal.lower() != "localhost" and not literal.lower().endswith(".localhost"):
        return False  # a name that resolves elsewhere some day must not count as loopback
    try:
        infos = socket.getaddrinfo(literal, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def is_loopback_host_header(value: str) -> bool:
    """A ``Host`` header that names this machine: localhost, 127.x.y.z or [::1], any port."""
    host = value.strip().lower()
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else host
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
