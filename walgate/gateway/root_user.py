"""The first administrator: TDengine's user ``root``, always a super user.

When authentication is on (a SASL listener or HTTP Basic auth) or ``WALGATE_ROOT_PASSWORD`` is set, start-up makes
sure ``root`` exists: created with the password ``WALGATE_ROOT_PASSWORD`` gives, or, when it is unset or empty, with
a generated one (:mod:`secrets`, 24 characters) printed once on stderr (not to the log). There is no built-in
default password. An existing ``root`` is never changed here: its password changes with ``ALTER USER root PASS
'...'`` (or AlterUserScramCredentials), and the variable only matters on the first start.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping

from walgate.gateway.storage_thread import StorageThread
from walgate.storage.engine import Engine
from walgate.storage.users import ROOT

__all__ = ["ROOT_PASSWORD_ENV", "bootstrap_root"]

log = logging.getLogger(__name__)

ROOT_PASSWORD_ENV = "WALGATE_ROOT_PASSWORD"


def _ensure_root(engine: Engine, password: str | None) -> tuple[bool, str | None]:
    existed = engine.users.get(ROOT) is not None
    return existed, engine.users.ensure_root(password, int(time.time() * 1000))


async def bootstrap_root(storage: StorageThread, engine: Engine, env: Mapping[str, str]) -> None:
    """Create ``root`` if absent (module docstring)."""
    existed, generated = await storage.call(_ensure_root, engine, env.get(ROOT_PASSWORD_ENV) or None)
    if existed:
        return
    if generated is None:
        log.info("created user %s with the password of %s", ROOT, ROOT_PASSWORD_ENV)
        return
    log.warning("created user %s with a generated password, printed once on stderr; change it with ALTER USER %s "
                "PASS '...'", ROOT, ROOT)
    print(f"walgate: the generated password of user {ROOT} is {generated} (shown once)", file=sys.stderr, flush=True)
