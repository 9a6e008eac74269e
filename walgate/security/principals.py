"""Kafka principals of walgate's users: ``User:<name>`` (Kafka's ``KafkaPrincipal`` form), and who is a super user.

``root`` (TDengine's first administrator, :mod:`walgate.storage.users`) is always a super user; Kafka's
``super.users`` setting (``Config.super_users``) names more. The authorizer lets super users do everything.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["ROOT_PRINCIPAL", "super_principals", "user_principal"]

ROOT_PRINCIPAL = "User:root"


def user_principal(name: str) -> str:
    """The principal of user ``name``."""
    return f"User:{name}"


def super_principals(configured: Iterable[str]) -> frozenset[str]:
    """The super users: the ``super.users`` principals and ``User:root``."""
    return frozenset(configured) | {ROOT_PRINCIPAL}
