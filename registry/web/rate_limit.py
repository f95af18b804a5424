"""Per-client rate limiting (429 `rate_limited` with `Retry-After`), in this process.

A request with a valid caller token is limited per verified identity (issuer, tenant, sub): however
the Authorization header is spelled, one identity has one bucket. Every other request (no token, a
bad token) is limited per client address: the peer address, or, when the peer is one of
CAPREG_TRUSTED_PROXIES, the first address in X-Forwarded-For (read from the right) that is not a
trusted proxy. Junk tokens therefore share their sender's bucket instead of each getting one.

Buckets are kept least-recently-used first and bounded: a flood of new keys evicts the idlest
buckets one by one, never every bucket at once.

Off unless CAPREG_RATE_LIMIT is set. Buckets are per process: with N workers or replicas a client
may get up to N times the rate; an edge proxy is the place for a global limit.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence

from litestar.types import ASGIApp, Receive, Scope, Send

from registry.core import error_codes as codes
from registry.core.problems import ProblemError, send_problem
from registry.web.authentication import caller_of_header

# Probes and scrapes must keep working for whoever is being limited.
_EXEMPT = frozenset({"/healthz", "/readyz", "/metrics"})
MAX_BUCKETS = 100_000
_MAX_FORWARDED_HOPS = 32

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class TokenBuckets:
    """`rate` requests per second per key, bursts up to `burst`. Pure apart from the clock it is given."""

    def __init__(self, rate: float, burst: int, *, max_buckets: int = MAX_BUCKETS):
        self.rate, self.burst, self.max_buckets = rate, burst, max_buckets
        self._buckets: OrderedDict[Hashable, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)

    def take(self, key: Hashable, now: float) -> float:
        """0 when a request may pass (and takes a token), else the seconds until one may."""
        tokens, at = self._buckets.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        wait = 0.0
        if tokens >= 1:
            tokens -= 1
        else:
            wait = (1 - tokens) / self.rate
        self._buckets[key] = (tokens, now)
        self._buckets.move_to_end(key)
        while len(self._buckets) > self.max_buckets:
            # The least recently used bucket is the idlest: it has refilled the most already.
            self._buckets.popitem(last=False)
        return wait

    def __len__(self) -> int:
        return len(self._buckets)


def trusted_networks(proxies: Sequence[str]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(p, strict=False) for p in proxies)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def client_address(scope: Scope, trusted: tuple[Network, ...]) -> str:
    """The address a request comes from, believing X-Forwarded-For only from trusted proxies."""
    client = scope.get("client")
    peer = _address(client[0]) if client else None
    if peer is None:
        return client[0] if client else "unknown"

    def is_trusted(address) -> bool:
        return any(address in network for network in trusted)

    if not trusted or not is_trusted(peer):
        return str(peer)
    forwarded = b",".join(v for k, v in scope["headers"] if k == b"x-forwarded-for").decode("latin-1")
    hops = [hop for hop in forwarded.split(",") if hop.strip()][-_MAX_FORWARDED_HOPS:]
    nearest = peer
    for hop in reversed(hops):
        address = _address(hop)
        if address is None:  # garbage a client wrote: the last address we can vouch for is the client
            break
        nearest = address
        if not is_trusted(address):
            break
    return str(nearest)


def address_bucket(address: str) -> str:
    """The bucket of a client address: an IPv6 client holds a whole /64 (it can pick any address in
    it), so the /64 is one bucket; an IPv4 address is its own."""
    parsed = _address(address)
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is None:
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return address


def rate_limit_middleware(
    buckets: TokenBuckets, trusted_proxies: Sequence[str] = (), clock: Callable[[], float] = time.monotonic
) -> Callable[[ASGIApp], ASGIApp]:
    trusted = trusted_networks(trusted_proxies)

    def wrap(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or scope["path"] in _EXEMPT:
                await app(scope, receive, send)
                return
            registry = scope["app"].state.registry
            header = next((v for k, v in scope["headers"] if k == b"authorization"), None)
            try:
                caller = await caller_of_header(
                    registry, header.decode("latin-1") if header is not None else None, scope.setdefault("state", {})
                )
            except ProblemError:
                caller = None  # the handler answers 401; until then the address is all we know
            key = (
                ("caller", caller.issuer, caller.tenant, caller.sub)
                if caller
                else ("address", address_bucket(client_address(scope, trusted)))
            )
            wait = buckets.take(key, clock())
            if not wait:
                await app(scope, receive, send)
                return
            retry_after = str(max(1, math.ceil(wait)))
            await send_problem(
                scope,
                send,
                ProblemError(
                    codes.RATE_LIMITED,
                    f"too many requests from this client; retry after {retry_after} s",
                    headers={"Retry-After": retry_after},
                ),
            )

        return middleware

    return wrap
