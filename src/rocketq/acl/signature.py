"""Request signatures of RocketMQ 4.x plain ACL (what ``AclClientRPCHook`` sends and
``PlainAccessValidator`` checks).

The signing client adds ``AccessKey`` (and ``SecurityToken`` when it has one) to the request's
extFields, then computes::

    content   = the values of all extFields except "Signature", ordered by key as a Java TreeMap
                orders Strings (UTF-16 code units), concatenated without separators, in UTF-8,
                followed by the body bytes
    Signature = base64(HMAC-SHA1(key = secretKey in UTF-8, data = content))

and adds ``Signature``. The server recomputes the content from the request as received, leaving
out ``Signature`` and also ``_UNIQUE_KEY_QUERY`` (RocketMQ's ``MixAll.UNIQUE_MSG_QUERY_FLAG``),
and compares. Keys are not part of the content, only values.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Collection, Mapping
from typing import Final

from rocketq.remoting.command import RemotingCommand

ACCESS_KEY: Final = "AccessKey"
SECRET_KEY: Final = "SecretKey"
SIGNATURE: Final = "Signature"
SECURITY_TOKEN: Final = "SecurityToken"
#: Left out of the server's content (``MixAll.UNIQUE_MSG_QUERY_FLAG``).
UNIQUE_MSG_QUERY_FLAG: Final = "_UNIQUE_KEY_QUERY"

_CLIENT_EXCLUDED: Final = frozenset({SIGNATURE})
_SERVER_EXCLUDED: Final = frozenset({SIGNATURE, UNIQUE_MSG_QUERY_FLAG})


def _java_string_order(key: str) -> bytes:
    # String.compareTo compares UTF-16 code units; big-endian UTF-16 bytes sort the same way.
    return key.encode("utf-16-be", "surrogatepass")


def combine_request_content(
    ext_fields: Mapping[str, str], body: bytes | None, exclude: Collection[str] = _CLIENT_EXCLUDED
) -> bytes:
    """The bytes a signature covers: the values of ``ext_fields`` (keys in ``exclude`` left
    out) in Java TreeMap order, concatenated, UTF-8, then ``body``."""
    keys = sorted(ext_fields)  # code point order; differs from Java's only beyond U+FFFF
    if not all(k.isascii() for k in keys):
        keys.sort(key=_java_string_order)
    text = "".join([ext_fields[k] for k in keys if k not in exclude])
    # Java's getBytes(UTF-8) writes '?' for an unpaired surrogate; "replace" does the same.
    return text.encode("utf-8", "replace") + (body or b"")


def calc_signature(data: bytes, secret_key: str) -> str:
    """base64(HMAC-SHA1(secret_key, data)), as ``AclSigner.calSignature``."""
    digest = hmac.new(secret_key.encode("utf-8", "replace"), data, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def server_content(request: RemotingCommand) -> bytes:
    """The content a server verifies ``request``'s signature against."""
    return combine_request_content(request.ext_fields, request.body, _SERVER_EXCLUDED)


def signature_matches(request: RemotingCommand, secret_key: str) -> bool:
    """Whether ``request`` carries the signature ``secret_key`` gives its content. Java clients
    sign ``_UNIQUE_KEY_QUERY`` along with the rest when they send it, while the Java server
    leaves it out; both contents are accepted."""
    given = request.ext_fields.get(SIGNATURE)
    if given is None:
        return False
    given_bytes = given.encode("utf-8", "replace")
    expected = calc_signature(server_content(request), secret_key)
    if hmac.compare_digest(expected.encode(), given_bytes):
        return True
    if UNIQUE_MSG_QUERY_FLAG not in request.ext_fields:
        return False
    expected = calc_signature(combine_request_content(request.ext_fields, request.body), secret_key)
    return hmac.compare_digest(expected.encode(), given_bytes)


def sign_request(
    request: RemotingCommand, access_key: str, secret_key: str, security_token: str | None = None
) -> None:
    """Add ``AccessKey`` (``SecurityToken``) and ``Signature`` to ``request``'s extFields."""
    fields = request.ext_fields
    fields.pop(SIGNATURE, None)
    fields[ACCESS_KEY] = access_key
    if security_token is not None:
        fields[SECURITY_TOKEN] = security_token
    fields[SIGNATURE] = calc_signature(combine_request_content(fields, request.body), secret_key)


class AclClientRpcHook:
    """Signs every request a :class:`~rocketq.remoting.client.RemotingClient` sends with one
    account (its ``rpc_hook``): ``hook(remote_addr, request)``."""

    __slots__ = ("_access_key", "_secret_key", "_security_token")

    def __init__(self, access_key: str, secret_key: str, security_token: str | None = None) -> None:
        if not access_key or not secret_key:
            raise ValueError("an ACL account needs a non-empty access key and secret key")
        self._access_key = access_key
        self._secret_key = secret_key
        self._security_token = security_token

    @property
    def access_key(self) -> str:
        return self._access_key

    def __call__(self, remote_addr: str, request: RemotingCommand) -> None:
        sign_request(request, self._access_key, self._secret_key, self._security_token)

    def __repr__(self) -> str:
        return f"AclClientRpcHook(access_key={self._access_key!r})"


__all__ = [
    "ACCESS_KEY",
    "SECRET_KEY",
    "SECURITY_TOKEN",
    "SIGNATURE",
    "UNIQUE_MSG_QUERY_FLAG",
    "AclClientRpcHook",
    "calc_signature",
    "combine_request_content",
    "server_content",
    "sign_request",
    "signature_matches",
]
