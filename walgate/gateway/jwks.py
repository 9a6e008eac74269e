"""The OAUTHBEARER verification keys and token settings from walgate's configuration (Kafka's names).

``sasl_oauthbearer_jwks_endpoint_url`` is a ``file://`` URL, as Kafka allows for
``sasl.oauthbearer.jwks.endpoint.url`` (https endpoints are not fetched by walgate: point a file at what the
identity provider publishes). :meth:`JwksFile.keys` re-reads the file when it changed (inode, size or mtime),
so a rotated key set is used from the next authentication on without a restart; one ``stat`` per call otherwise.
A file that is missing or no JWKS keeps the keys read before (none at first: every token is then refused) and is
logged once per change.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from walgate.security.oauthbearer import Jwks, OAuthBearerExchange, TokenSettings

if TYPE_CHECKING:
    from walgate.gateway.config import Config

__all__ = ["JwksFile", "jwks_path", "oauthbearer_exchanges", "token_settings"]

log = logging.getLogger("walgate.security.oauthbearer")

_MAX_JWKS_BYTES = 1 << 20


def jwks_path(url: str) -> Path:
    """The path of a ``file://`` JWKS URL; raises ``ValueError`` for any other URL."""
    parts = urlsplit(url)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost") or not parts.path:
        raise ValueError(f"{url!r}: walgate reads the JWKS from a file:///path URL only")
    return Path(unquote(parts.path))


def token_settings(config: Config) -> TokenSettings:
    """:class:`TokenSettings` from the configuration (no issuer: any)."""
    return TokenSettings(expected_issuer=config.sasl_oauthbearer_expected_issuer or None,
                         expected_audience=config.sasl_oauthbearer_expected_audience,
                         scope_claim_name=config.sasl_oauthbearer_scope_claim_name,
                         sub_claim_name=config.sasl_oauthbearer_sub_claim_name,
                         clock_skew_seconds=config.sasl_oauthbearer_clock_skew_seconds)


def oauthbearer_exchanges(config: Config) -> Callable[[int], OAuthBearerExchange] | None:
    """``new(now_ms)`` starting one OAUTHBEARER authentication with the configured keys (re-read when the JWKS file
    changed) and settings, or None when no JWKS is configured (OAUTHBEARER is then not offered)."""
    if not config.sasl_oauthbearer_jwks_endpoint_url:
        return None
    keys, settings = JwksFile(config.sasl_oauthbearer_jwks_endpoint_url), token_settings(config)
    return lambda now_ms: OAuthBearerExchange(keys.keys(), settings, now_ms)


class JwksFile:
    """The keys of a JWKS file, re-read whenever the file changes."""

    def __init__(self, url: str) -> None:
        self.path = jwks_path(url)
        self._stamp: tuple[int, int, int] | None = (-1, -1, -1)  # not read yet; None: missing
        self._keys = Jwks()

    def keys(self) -> Jwks:
        """The keys of the file as it is now (see the module docstring)."""
        try:
            st = os.stat(self.path)
            stamp: tuple[int, int, int] | None = (st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError as exc:
            stamp, why = None, exc.strerror
        if stamp == self._stamp:
            return self._keys
        self._stamp = stamp
        try:
            if stamp is None:
                raise ValueError(why)
            if stamp[1] > _MAX_JWKS_BYTES:
                raise ValueError(f"larger than {_MAX_JWKS_BYTES} bytes")
            keys = Jwks.from_json(self.path.read_bytes())
        except (OSError, ValueError) as exc:
            log.warning("OAUTHBEARER JWKS %s cannot be used (%s); keeping the %d keys read before", self.path, exc,
                        len(self._keys.keys))
            return self._keys
        self._keys = keys
        log.info("OAUTHBEARER JWKS %s read: %d verification keys", self.path, len(keys.keys))
        return self._keys
