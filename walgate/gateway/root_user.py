"""The first administrator: TDengine's user ``root``, always a super user.

When authentication is on (a SASL listener or HTTP Basic auth) or ``WALGATE_ROOT_PASSWORD`` or
``WALGATE_ROOT_PASSWORD_FILE`` is set, start-up makes
sure ``root`` exists: created with the password ``WALGATE_ROOT_PASSWORD`` gives, or the content of the file
``WALGATE_ROOT_PASSWORD_FILE`` names (a Docker / Kubernetes secret; one trailing newline is not part of it), or,
when neither is set (or the variable is empty), with a generated one (:mod:`secrets`, 24 characters) printed once on
stderr (not to the log). There is no built-in default password. Setting both variables, or naming a file that
cannot be read or is empty, stops the start (:class:`ConfigError`), even when ``root`` exists: a broken secret is
never silently ignored. An existing ``root`` is never changed here: its password changes with ``ALTER USER root PASS
'...'`` (or AlterUserScramCredentials), and the variables only matter on the first start.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from walgate.gateway.config import ConfigError
from walgate.storage.engine import Engine
from walgate.storage.users import ROOT

__all__ = ["ROOT_PASSWORD_ENV", "ROOT_PASSWORD_FILE_ENV", "bootstrap_root", "root_password"]

log = logging.getLogger(__name__)

ROOT_PASSWORD_ENV = "WALGATE_ROOT_PASSWORD"
ROOT_PASSWORD_FILE_ENV = "WALGATE_ROOT_PASSWORD_FILE"


def root_password(env: Mapping[str, str]) -> str | None:
    """root's first password from ``env`` (module docstring), None for a generated one; raises
    :class:`ConfigError` (without the password) for both variables set or an unreadable or empty file."""
    path = env.get(ROOT_PASSWORD_FILE_ENV)
    if not path:
        return env.get(ROOT_PASSWORD_ENV) or None
    if env.get(ROOT_PASSWORD_ENV):
        raise ConfigError(f"set either {ROOT_PASSWORD_ENV} or {ROOT_PASSWORD_FILE_ENV}, not both")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{ROOT_PASSWORD_FILE_ENV}: cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    password = text.removesuffix("\n").removesuffix("\r")
    if not password:
        raise ConfigError(f"{ROOT_PASSWORD_FILE_ENV}: {path} is empty")
    return password


def _ensure_root(engine: Engine, password: str | None) -> tuple[bool, str | None]:
    existed = engine.users.get(ROOT) is not None
    return existed, engine.users.ensure_root(password, int(time.time() * 1000))


async def bootstrap_root(run: Callable[..., Awaitable[tuple[bool, str | None]]], engine: Engine,
                         env: Mapping[str, str]) -> None:
    """Create ``root`` if absent (module docstring); ``run(fn, *args)`` runs ``fn`` on the storage thread (the
    storage lane's ``call``, or in cluster mode the shared catalog's ``run``: root is then the cluster's)."""
    password = root_password(env)
    existed, generated = await run(_ensure_root, engine, password)
    if existed:
        return
    if generated is None:
        source = ROOT_PASSWORD_FILE_ENV if env.get(ROOT_PASSWORD_FILE_ENV) else ROOT_PASSWORD_ENV
        log.info("created user %s with the password of %s", ROOT, source)
        return
    log.warning("created user %s with a generated password, printed once on stderr; change it with ALTER USER %s "
                "PASS '...'", ROOT, ROOT)
    print(f"walgate: the generated password of user {ROOT} is {generated} (shown once)", file=sys.stderr, flush=True)
