"""Which hosts a team's tool packs may reach: the guard against server-side request forgery.

A workspace admin is not the operator. In a multi-workspace install, an admin who types
`/tools install mcp url=http://10.0.0.5/...` must not make the bot fetch the operator's own
network, nor the cloud's metadata service (which hands out credentials). The operator decides:

- `BOT_TOOL_HOSTS` set (host names, `*.example.com` suffixes, IP addresses or CIDR ranges,
  comma-separated): only those may be reached, whatever their addresses;
- unset: only public addresses when several workspaces/guilds can install (Slack OAuth,
  Discord); any address on a single-workspace Slack app and the console, where the admin is
  the operator;
- link-local (169.254.0.0/16, fe80::/10), unspecified, multicast and known cloud-metadata
  addresses and names are refused always, even when listed.

The check runs on every request a guarded HTTP client sends (an httpx event hook, so each hop of
a redirect is checked too), after resolving the name: every address it resolves to must pass.
A response hook then checks the address the connection actually reached, which catches a name
that resolved differently at connect time (DNS rebinding); that request has been sent by then,
but its answer never reaches the model.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tools.errors import ToolBusinessError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_ALWAYS_BLOCKED_NETS: tuple[IPNetwork, ...] = (
    ipaddress.ip_network("169.254.0.0/16"),  # IPv4 link-local, incl. 169.254.169.254
    ipaddress.ip_network("fe80::/10"),  # IPv6 link-local
    ipaddress.ip_network("0.0.0.0/8"),  # "this network"
    ipaddress.ip_network("224.0.0.0/4"),  # multicast
    ipaddress.ip_network("ff00::/8"),
    ipaddress.ip_network("100.100.100.200/32"),  # Alibaba Cloud metadata
    ipaddress.ip_network("fd00:ec2::254/128"),  # AWS metadata over IPv6
    ipaddress.ip_network("192.0.0.192/32"),  # Oracle Cloud metadata
)
_METADATA_NAMES = frozenset(
    {"metadata", "metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2"}
)


class BlockedHost(ToolBusinessError):
    """The address is not one this bot's operator lets tool packs reach. Safe to show."""


_NAT64 = (
    ipaddress.ip_network("64:ff9b::/96"),  # RFC 6052 well-known prefix
    ipaddress.ip_network("64:ff9b:1::/48"),  # RFC 8215 local-use prefix (IPv4 in the low bits)
    ipaddress.ip_network("::ffff:0:0:0/96"),  # RFC 2765 "IPv4-translated"
)


def _unwrap(ip: IPAddress) -> IPAddress:
    """An IPv6 form that carries an IPv4 address is judged as that IPv4 address: mapped
    (`::ffff:169.254.169.254`), compatible (`::169.254.169.254`, deprecated but still routed by
    some stacks), NAT64 (`64:ff9b::169.254.169.254`, which a NAT64 gateway turns into the IPv4
    metadata address), 6to4 and Teredo. `::` and `::1` stay themselves."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return ip
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    low = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if int(ip) >> 32 == 0 and int(low) > 0xFFFFFF:  # IPv4-compatible, not ::/104 (::, ::1)
        return low
    if any(ip in net for net in _NAT64):
        return low
    return ip


def always_blocked(ip: IPAddress) -> bool:
    inner = _unwrap(ip)
    return any(
        a.is_unspecified or any(a in net for net in _ALWAYS_BLOCKED_NETS) for a in (ip, inner)
    )


@dataclass(frozen=True)
class HostPolicy:
    """What installed packs may reach. Build it with `HostPolicy.from_setting`."""

    names: frozenset[str] = frozenset()  # exact host names, lower case
    suffixes: tuple[str, ...] = ()  # ".example.com" for "*.example.com"
    networks: tuple[IPNetwork, ...] = ()
    private_ok: bool = True  # unset list: may private/loopback addresses be reached?
    resolver: Callable[[str, int], Awaitable[list[str]]] | None = field(default=None, compare=False)

    @classmethod
    def from_setting(cls, text: str | None, *, multi_tenant: bool) -> HostPolicy:
        """Parse `BOT_TOOL_HOSTS`; raises ValueError naming the bad entry."""
        names: set[str] = set()
        suffixes: list[str] = []
        networks: list[IPNetwork] = []
        for raw in (text or "").split(","):
            entry = raw.strip().lower().rstrip(".")
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            label = entry.removeprefix("*.")
            if not label or any(not _label_ok(part) for part in label.split(".")):
                raise ValueError(f"{raw.strip()!r} is not a host name, IP address or CIDR range")
            if entry.startswith("*."):
                suffixes.append("." + label)
            else:
                names.add(entry)
        return cls(frozenset(names), tuple(suffixes), tuple(networks), private_ok=not multi_tenant)

    @property
    def listed(self) -> bool:
        return bool(self.names or self.suffixes or self.networks)

    def describe(self) -> str:
        if self.listed:
            return "only the hosts in BOT_TOOL_HOSTS"
        return "any address" if self.private_ok else "public addresses only"

    def _name_listed(self, host: str) -> bool:
        return host in self.names or any(host.endswith(s) for s in self.suffixes)

    def address_refusal(self, ip: IPAddress, *, name_listed: bool) -> str | None:
        """Why this address may not be reached, or None when it may."""
        if always_blocked(ip):
            return "link-local and cloud-metadata addresses are never reachable"
        if self.listed:
            if name_listed or any(_unwrap(ip) in net or ip in net for net in self.networks):
                return None
            return "the host is not in this bot's BOT_TOOL_HOSTS"
        if self.private_ok or _unwrap(ip).is_global:
            return None
        return "private and local addresses are not reachable from tool packs on this bot"

    async def check_url(self, url: str) -> None:
        """Raise BlockedHost unless every address `url`'s host resolves to may be reached."""
        parts = urlsplit(url)
        host = (parts.hostname or "").lower().rstrip(".")
        if parts.scheme not in ("http", "https") or not host:
            raise BlockedHost("Only http:// and https:// URLs with a host can be reached.")
        if host in _METADATA_NAMES or (host.endswith(".internal") and "metadata" in host):
            raise BlockedHost(f"{host} is a cloud-metadata address and is never reachable.")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise BlockedHost("The URL's port is not a number.") from None
        literal = _ip(host)
        name_listed = literal is None and self._name_listed(host)
        if literal is not None:
            addresses = [literal]
        else:
            if self.listed and not name_listed and not self.networks:
                raise BlockedHost(f"{host} is not in this bot's BOT_TOOL_HOSTS.")
            addresses = [a for a in map(_ip, await self._resolve(host, port)) if a is not None]
            if not addresses:
                raise BlockedHost(f"{host} does not resolve to an address.")
        for ip in addresses:
            why = self.address_refusal(ip, name_listed=name_listed)
            if why is not None:
                raise BlockedHost(f"{host} cannot be reached: {why}.")

    def check_peer(self, host: str, peer: str) -> None:
        """After connecting: the address actually reached must pass as well (DNS rebinding)."""
        ip = _ip(peer)
        if ip is None:
            return
        name_listed = _ip(host) is None and self._name_listed(host.lower().rstrip("."))
        why = self.address_refusal(ip, name_listed=name_listed)
        if why is not None:
            raise BlockedHost(f"{host} cannot be reached: {why}.")

    async def _resolve(self, host: str, port: int) -> list[str]:
        if self.resolver is not None:
            return await self.resolver(host, port)
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except (OSError, UnicodeError):
            raise BlockedHost(f"{host} does not resolve to an address.") from None
        return [str(info[4][0]) for info in infos]


ANY_HOST = HostPolicy()
"""No restriction beyond the always-refused addresses (single-workspace bots, tests)."""


def _label_ok(label: str) -> bool:
    return 0 < len(label) <= 63 and all(c.isalnum() or c == "-" for c in label)


def _ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def event_hooks(policy: HostPolicy) -> dict[str, list[Callable[[Any], Awaitable[None]]]]:
    """`event_hooks=` for an `httpx.AsyncClient` (or `httpx2`, same API) that only reaches what
    `policy` allows: every request (each redirect hop too) before it is sent, and the address
    each response actually came from."""

    async def on_request(request: Any) -> None:
        await policy.check_url(str(request.url))

    async def on_response(response: Any) -> None:
        stream = response.extensions.get("network_stream")
        if stream is None:
            return
        try:
            peer = stream.get_extra_info("server_addr")
        except Exception:
            return
        if isinstance(peer, tuple) and peer:
            policy.check_peer(str(response.request.url.host), str(peer[0]))

    return {"request": [on_request], "response": [on_response]}
