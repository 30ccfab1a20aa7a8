"""Who a request is and what it may do: bearer tokens and their digests (``bearer``), the
short in-process cache of verified tokens (``token_cache``), revocations that reach every
replica's cache before they are answered (``revocations``), and what a token's scope allows
(``scopes``).

The request dependencies that apply these are ``routes.deps``; the token rows are
``store.tokens``.
"""
