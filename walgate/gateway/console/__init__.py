"""The web console at ``/ui``: a page (static files in ``static/``) over a small JSON API (:mod:`.api`) whose
answers :mod:`.views` reads on the storage thread."""

from __future__ import annotations

from walgate.gateway.console.api import add_console

__all__ = ["add_console"]
