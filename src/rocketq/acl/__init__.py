"""Access control compatible with RocketMQ 4.x plain ACL, on the remoting protocol.

Modules::

    signature.py    the request signature (HMAC-SHA1 over the sorted extFields values and the
                    body) and AclClientRpcHook, which signs what a RemotingClient sends
    plain.py        plain_acl.yml, what each request code needs, the decision, hot reload
    address.py      the remote address patterns of plain_acl.yml
    yaml_subset.py  the part of YAML plain_acl.yml files use

The broker checks every request before its processor runs when ``aclEnable=true``; the name
server checks registrations and KV/config writes when its own ``aclEnable=true``
(``docs/security.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocketq._lazy import lazy_exports

if TYPE_CHECKING:
    from rocketq.acl.plain import (
        ADMIN_CODES,
        NAMESRV_PROTECTED_CODES,
        PlainAclConfig,
        PlainAclValidator,
        load_plain_acl,
        parse_plain_acl,
    )
    from rocketq.acl.signature import AclClientRpcHook, calc_signature, sign_request

_EXPORTS: dict[str, str] = {
    "ADMIN_CODES": "rocketq.acl.plain",
    "NAMESRV_PROTECTED_CODES": "rocketq.acl.plain",
    "AclClientRpcHook": "rocketq.acl.signature",
    "PlainAclConfig": "rocketq.acl.plain",
    "PlainAclValidator": "rocketq.acl.plain",
    "calc_signature": "rocketq.acl.signature",
    "load_plain_acl": "rocketq.acl.plain",
    "parse_plain_acl": "rocketq.acl.plain",
    "sign_request": "rocketq.acl.signature",
}

__all__ = [
    "ADMIN_CODES",
    "NAMESRV_PROTECTED_CODES",
    "AclClientRpcHook",
    "PlainAclConfig",
    "PlainAclValidator",
    "calc_signature",
    "load_plain_acl",
    "parse_plain_acl",
    "sign_request",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
