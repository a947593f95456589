"""The API key check every door shares (HTTP's middleware, the gRPC service)."""

from __future__ import annotations

import hmac
from collections.abc import Collection


def presented_key(authorization: str, x_api_key: str) -> str:
    """The key a caller presented: ``Authorization: Bearer KEY``, else ``X-Api-Key``."""
    return (authorization or x_api_key).removeprefix("Bearer ").strip()


def key_is_valid(presented: str, keys: Collection[str]) -> bool:
    """Constant-time comparison against every configured key."""
    presented_bytes = presented.encode()
    valid = False
    for key in keys:
        valid |= hmac.compare_digest(presented_bytes, key.encode())
    return valid
