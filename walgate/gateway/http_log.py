"""The log of walgate's HTTP server for what aiohttp answers itself.

aiohttp answers a request it cannot read as HTTP (a header line past its 8190 bytes, bytes no HTTP parser takes: an
:class:`~aiohttp.http_exceptions.HttpProcessingError`) with a 4xx of its own, and logs it with a traceback at ERROR
level, as it logs its own failures. Such a request is the client's error, answered clearly: :class:`ServerLog` logs
it as one WARNING line naming the peer, the status and why; anything else as aiohttp does.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.log import server_logger

__all__ = ["ServerLog"]


class ServerLog(logging.LoggerAdapter):  # type: ignore[type-arg]  # (generic only in typeshed)
    """aiohttp's ``aiohttp.server`` logger, a request it cannot read logged as a warning (module docstring); given to
    its server as ``logger``."""

    def __init__(self) -> None:
        super().__init__(server_logger, {})

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        if isinstance(exc_info, HttpProcessingError):
            self.warning(f"{msg}: HTTP %s: %s", *args, exc_info.code, str(exc_info.message)[:300], **kwargs)
            return
        super().exception(msg, *args, exc_info=exc_info, **kwargs)
