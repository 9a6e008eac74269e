"""Authentication mechanisms: SCRAM (RFC 5802/7677) and PLAIN (RFC 4616), pure and synchronous.

Nothing here does I/O, reads the clock or imports asyncio; the gateway drives the exchanges and looks credentials up
in the user store (:mod:`walgate.storage.users`). Secrets are compared with :func:`hmac.compare_digest` and never put
in an exception message.
"""
