"""Security mechanisms as pure functions and values: the ACL model (:mod:`.acl`) and its authorizer
(:mod:`.authorizer`). No I/O, no asyncio: the gateway supplies the principal and host of a request."""
