"""Security mechanisms as pure functions and values: the ACL model (:mod:`.acl`) and its authorizer
(:mod:`.authorizer`), the SQL statements' needs (:mod:`.sql_access`), and the authentication mechanisms:
SCRAM (RFC 5802/7677), PLAIN (RFC 4616) and OAUTHBEARER (:mod:`.oauthbearer`, RFC 7628 with signed JWTs).

Nothing here does I/O or imports asyncio; the gateway supplies the principal and host of a request, drives the
exchanges and looks credentials up in the user store. Secrets are compared with :func:`hmac.compare_digest` and never
put in an exception message.
"""
