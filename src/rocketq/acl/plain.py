"""RocketMQ 4.x plain ACL: the ``plain_acl.yml`` file, what each request needs, the decision.

File format (RocketMQ's; unknown keys are ignored)::

    globalWhiteRemoteAddresses:      # requests from these pass without keys
      - 10.10.103.*
    accounts:
      - accessKey: RocketMQ          # longer than 6 characters, unique
        secretKey: 12345678          # longer than 6 characters
        whiteRemoteAddress:          # requests of this key from here pass without a signature
        admin: false                 # admin: the admin request codes; all resources when no
                                     #   topicPerms/groupPerms are given
        defaultTopicPerm: DENY       # DENY, PUB, SUB, PUB|SUB; absent = DENY
        defaultGroupPerm: SUB
        topicPerms: [topicA=DENY, topicB=PUB|SUB, topicC=SUB]
        groupPerms: [groupA=DENY, groupB=PUB|SUB, groupC=SUB]

The decision for one request (RocketMQ's ``PlainPermissionManager.validate``): a globally
white-listed remote address passes; otherwise the request must carry an ``AccessKey`` that the
file knows; a request from that account's ``whiteRemoteAddress`` passes; otherwise the signature
must match (:mod:`rocketq.acl.signature`), an admin-only code needs ``admin: true``, and every
resource the request touches (:func:`needed_resources`) needs its permission. A consumer group
``G`` is the resource ``%RETRY%G`` (so a group's retry topic is governed by ``groupPerms``).

:class:`PlainAclValidator` reads the file at construction (a missing or bad file raises
:class:`~rocketq.errors.ConfigError`) and again, on use, when its modification time or size has
changed — checked at most once per ``reload_interval_s``. A change that does not load is logged
and the previous rules stay in force.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from rocketq.acl.address import AddressMatcher, compile_address_pattern, host_of
from rocketq.acl.signature import ACCESS_KEY, signature_matches
from rocketq.acl.yaml_subset import parse_yaml
from rocketq.errors import ConfigError, ResponseCode
from rocketq.protocol.heartbeat import loads_body
from rocketq.protocol.topic import RETRY_GROUP_TOPIC_PREFIX
from rocketq.remoting.codes import RequestCode
from rocketq.remoting.command import RemotingCommand, create_response

log = logging.getLogger(__name__)

PERM_DENY: Final = 1
PERM_ANY: Final = 2
PERM_PUB: Final = 4
PERM_SUB: Final = 8

#: The name-server codes checked when the name server has ACL on (all admin-only); the others
#: (route and cluster queries) stay open, as in RocketMQ 4.x, whose name server has no ACL.
NAMESRV_PROTECTED_CODES: Final = frozenset(
    {
        RequestCode.PUT_KV_CONFIG,
        RequestCode.DELETE_KV_CONFIG,
        RequestCode.REGISTER_BROKER,
        RequestCode.UNREGISTER_BROKER,
        RequestCode.BROKER_HEARTBEAT,
        RequestCode.WIPE_WRITE_PERM_OF_BROKER,
        RequestCode.ADD_WRITE_PERM_OF_BROKER,
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        RequestCode.REGISTER_TOPIC_IN_NAMESRV,
        RequestCode.UPDATE_NAMESRV_CONFIG,
    }
)

#: Request codes only admin accounts may send: RocketMQ's ``Permission.ADMIN_CODE`` (the first
#: five) and the other codes that change or erase state for everybody, the name server's among them.
ADMIN_CODES: Final = (
    frozenset(
        {
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            RequestCode.UPDATE_BROKER_CONFIG,
            RequestCode.DELETE_TOPIC_IN_BROKER,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            RequestCode.DELETE_SUBSCRIPTIONGROUP,
            # rocketq additions
            RequestCode.UPDATE_AND_CREATE_TOPIC_LIST,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
            RequestCode.RESET_CONSUMER_OFFSET_IN_BROKER,
            RequestCode.CLONE_GROUP_OFFSET,
            RequestCode.DELETE_EXPIRED_COMMITLOG,
        }
    )
    | NAMESRV_PROTECTED_CODES
)

_MIN_KEY_LENGTH: Final = 7  # RocketMQ: "length should longer than 6"
DEFAULT_RELOAD_INTERVAL_S: Final = 1.0


def resolve_acl_file(acl_file: str | None) -> str:
    """``acl_file``, else ``$ROCKETMQ_HOME/conf/plain_acl.yml`` (RocketMQ's place for it);
    ConfigError when neither is set."""
    if acl_file:
        return acl_file
    home = os.environ.get("ROCKETMQ_HOME")
    if not home:
        raise ConfigError("aclEnable=true needs aclFile=<path> or $ROCKETMQ_HOME (for conf/plain_acl.yml)")
    return os.path.join(home, "conf", "plain_acl.yml")


def parse_perm(text: str | None) -> int:
    """``PUB``, ``SUB``, ``PUB|SUB`` (either order), ``DENY``; anything else is DENY (as Java)."""
    value = (text or "").strip()
    if value == "PUB":
        return PERM_PUB
    if value == "SUB":
        return PERM_SUB
    if value in ("PUB|SUB", "SUB|PUB"):
        return PERM_PUB | PERM_SUB
    return PERM_DENY


def perm_allows(needed: int, owned: int) -> bool:
    """RocketMQ's ``Permission.checkPermission``."""
    if owned & PERM_DENY:
        return False
    if needed & PERM_ANY:
        return bool(owned & (PERM_PUB | PERM_SUB))
    return bool(needed & owned)


def perm_name(perm: int) -> str:
    if perm & PERM_ANY:
        return "PUB or SUB"
    names = [n for bit, n in ((PERM_PUB, "PUB"), (PERM_SUB, "SUB")) if perm & bit]
    return "|".join(names) or "DENY"


def group_resource(group: str) -> str:
    """The resource name of consumer group ``group`` (its retry topic)."""
    return group if group.startswith(RETRY_GROUP_TOPIC_PREFIX) else RETRY_GROUP_TOPIC_PREFIX + group


def describe_resource(resource: str) -> str:
    if resource.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return f"group {resource[len(RETRY_GROUP_TOPIC_PREFIX) :]}"
    return f"topic {resource}"


@dataclass(frozen=True, slots=True)
class Account:
    """One ``accounts`` entry."""

    access_key: str
    secret_key: str = field(repr=False)
    white_remote_address: str | None = None
    admin: bool = False
    default_topic_perm: int = PERM_DENY
    default_group_perm: int = PERM_DENY
    #: resource (topic, or ``%RETRY%group``) → permission; None when the file lists none.
    resource_perms: Mapping[str, int] | None = None
    white_match: AddressMatcher = field(default=compile_address_pattern(None), repr=False, compare=False)

    def owned_perm(self, resource: str) -> int:
        if self.resource_perms is not None and resource in self.resource_perms:
            return self.resource_perms[resource]
        if resource.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return self.default_group_perm
        return self.default_topic_perm


@dataclass(frozen=True, slots=True)
class PlainAclConfig:
    """A parsed ``plain_acl.yml``."""

    global_white_remote_addresses: tuple[str, ...] = ()
    accounts: Mapping[str, Account] = field(default_factory=dict)
    global_white_match: tuple[AddressMatcher, ...] = field(default=(), repr=False, compare=False)

    def globally_white(self, host: str) -> bool:
        return any(match(host) for match in self.global_white_match)


def _as_list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        return [value]
    raise ConfigError(f"{what} must be a list")


def _as_bool(value: Any, what: str) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ConfigError(f"{what}={value!r}: expected true or false")


def _resource_perms(items: Iterable[Any], *, groups: bool, who: str) -> dict[str, int]:
    out: dict[str, int] = {}
    kind = "groupPerms" if groups else "topicPerms"
    for item in items:
        name, sep, perm = str(item).partition("=")
        if not sep or not name.strip() or "=" in perm:
            raise ConfigError(f"account {who}: {kind} entry {item!r} is not name=PERM")
        key = group_resource(name.strip()) if groups else name.strip()
        out[key] = parse_perm(perm)
    return out


def _account(raw: Any, index: int) -> Account:
    if not isinstance(raw, dict):
        raise ConfigError(f"accounts[{index}] is not a mapping")
    access_key = raw.get("accessKey")
    secret_key = raw.get("secretKey")
    who = str(access_key) if access_key else f"accounts[{index}]"
    if access_key is None or secret_key is None:
        raise ConfigError(f"account {who}: accessKey and secretKey are required")
    access_key, secret_key = str(access_key), str(secret_key)
    if len(access_key) < _MIN_KEY_LENGTH or len(secret_key) < _MIN_KEY_LENGTH:
        raise ConfigError(f"account {who}: accessKey and secretKey must be longer than 6 characters")
    white = raw.get("whiteRemoteAddress")
    white_text = None if white is None else str(white)
    try:
        white_match = compile_address_pattern(white_text)
    except ConfigError as exc:
        raise ConfigError(f"account {who}: whiteRemoteAddress: {exc}") from None
    perms: dict[str, int] | None = None
    topic_items = _as_list(raw.get("topicPerms"), f"account {who}: topicPerms")
    group_items = _as_list(raw.get("groupPerms"), f"account {who}: groupPerms")
    if topic_items or group_items:
        perms = _resource_perms(group_items, groups=True, who=who)
        perms.update(_resource_perms(topic_items, groups=False, who=who))
    return Account(
        access_key=access_key,
        secret_key=secret_key,
        white_remote_address=white_text,
        admin=_as_bool(raw.get("admin"), f"account {who}: admin"),
        default_topic_perm=parse_perm(raw.get("defaultTopicPerm")),
        default_group_perm=parse_perm(raw.get("defaultGroupPerm")),
        resource_perms=perms,
        white_match=white_match,
    )


def parse_plain_acl(text: str) -> PlainAclConfig:
    """A ``plain_acl.yml`` document; raises ConfigError naming what is wrong."""
    doc = parse_yaml(text)
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ConfigError("plain_acl.yml must be a mapping at the top level")
    patterns = tuple(
        str(p) for p in _as_list(doc.get("globalWhiteRemoteAddresses"), "globalWhiteRemoteAddresses") if p
    )
    matchers: list[AddressMatcher] = []
    for pattern in patterns:
        try:
            matchers.append(compile_address_pattern(pattern))
        except ConfigError as exc:
            raise ConfigError(f"globalWhiteRemoteAddresses: {exc}") from None
    accounts: dict[str, Account] = {}
    for index, raw in enumerate(_as_list(doc.get("accounts"), "accounts")):
        account = _account(raw, index)
        if account.access_key in accounts:
            raise ConfigError(f"accessKey {account.access_key} appears twice")
        accounts[account.access_key] = account
    return PlainAclConfig(patterns, accounts, tuple(matchers))


def load_plain_acl(path: str | os.PathLike[str]) -> PlainAclConfig:
    """Read and parse a ``plain_acl.yml``; ConfigError names the file and the problem."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError(f"cannot read ACL file {os.fspath(path)}: {exc.strerror or exc}") from None
    try:
        return parse_plain_acl(text)
    except ConfigError as exc:
        raise ConfigError(f"ACL file {os.fspath(path)}: {exc}") from None


# ---------------------------------------------------------------------------------------------
# What a request needs


def _heartbeat_resources(body: bytes, need: dict[str, int]) -> None:
    if not body:
        return
    try:
        obj = loads_body(body)
    except ValueError:
        return  # the processor answers the malformed body
    if not isinstance(obj, dict):
        return
    for consumer in obj.get("consumerDataSet") or ():
        if not isinstance(consumer, dict) or not consumer.get("groupName"):
            continue
        need[group_resource(str(consumer["groupName"]))] = PERM_SUB
        for sub in consumer.get("subscriptionDataSet") or ():
            if isinstance(sub, dict) and sub.get("topic"):
                need[str(sub["topic"])] = PERM_SUB


def needed_resources(request: RemotingCommand) -> dict[str, int]:
    """resource → permission the request needs (RocketMQ's ``PlainAccessResource.parse``, with
    batch and reply sends, lite pulls, pops and offset queries added). A send to a retry topic
    needs SUB on its group; a send-back needs SUB on the group and PUB or SUB on the original
    topic (RocketMQ asks PUB there)."""
    ext = request.ext_fields
    code = request.code
    need: dict[str, int] = {}

    def add(resource: str | None, perm: int) -> None:
        if resource:
            need[resource] = need.get(resource, 0) | perm

    if code in (
        RequestCode.SEND_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
        RequestCode.SEND_REPLY_MESSAGE,
        RequestCode.SEND_REPLY_MESSAGE_V2,
    ):
        topic = ext.get("topic") if "topic" in ext else ext.get("b")
        if topic and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            add(topic, PERM_SUB)
        else:
            add(topic, PERM_PUB)
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        group = ext.get("group")
        add(group_resource(group) if group else None, PERM_SUB)
        add(ext.get("originTopic"), PERM_ANY)
    elif code in (
        RequestCode.PULL_MESSAGE,
        RequestCode.LITE_PULL_MESSAGE,
        RequestCode.POP_MESSAGE,
        RequestCode.PEEK_MESSAGE,
        RequestCode.ACK_MESSAGE,
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
        RequestCode.NOTIFICATION,
        RequestCode.POLLING_INFO,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        RequestCode.QUERY_CONSUMER_OFFSET,
    ):
        add(ext.get("topic"), PERM_SUB)
        group = ext.get("consumerGroup")
        add(group_resource(group) if group else None, PERM_SUB)
    elif code == RequestCode.QUERY_MESSAGE:
        add(ext.get("topic"), PERM_SUB)
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        group = ext.get("consumerGroup")
        add(group_resource(group) if group else None, PERM_SUB)
    elif code == RequestCode.HEART_BEAT:
        _heartbeat_resources(request.body, need)
    return need


def code_name(code: int) -> str:
    try:
        return f"{code} ({RequestCode(code).name})"
    except ValueError:
        return str(code)


# ---------------------------------------------------------------------------------------------
# The decision, with the file reloaded when it changes


def _not_admin(code: int, access_key: str) -> str:
    return f"No permission for request code {code_name(code)}: accessKey {access_key} is not admin"


def decide(
    config: PlainAclConfig,
    request: RemotingCommand,
    remote_host: str,
    admin_codes: frozenset[int] = ADMIN_CODES,
    *,
    strict_admin: bool = False,
) -> str | None:
    """None when ``request`` from ``remote_host`` is allowed, else why not (a remark naming
    what was refused). ``strict_admin``: an admin code needs an admin account also from the
    account's ``whiteRemoteAddress`` (RocketMQ lets such requests through unchecked)."""
    if config.globally_white(remote_host):
        return None
    access_key = request.ext_fields.get(ACCESS_KEY)
    if not access_key:
        return f"No accessKey in request code {code_name(request.code)} from {remote_host}; ACL is enabled"
    account = config.accounts.get(access_key)
    if account is None:
        return f"No acl config for accessKey {access_key}"
    if account.white_match(remote_host):
        if strict_admin and request.code in admin_codes and not account.admin:
            return _not_admin(request.code, access_key)
        return None
    if not signature_matches(request, account.secret_key):
        return f"signature mismatch for accessKey {access_key}"
    if request.code in admin_codes and not account.admin:
        return (
            f"No permission for request code {code_name(request.code)}: accessKey {access_key} is not admin"
        )
    if account.admin and account.resource_perms is None:
        return None
    for resource, needed in needed_resources(request).items():
        if not perm_allows(needed, account.owned_perm(resource)):
            what = f"{perm_name(needed)} {describe_resource(resource)}"
            return f"No permission to {what} for accessKey {access_key}"
    return None


class PlainAclValidator:
    """The rules of one ``plain_acl.yml``, reloaded when the file changes (thread-safe)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        reload_interval_s: float = DEFAULT_RELOAD_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = os.fspath(path)
        self._reload_interval_s = reload_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stamp = self._file_stamp()
        self._config = load_plain_acl(self.path)
        self._checked_at = clock()
        self._missing_logged = False

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    @property
    def config(self) -> PlainAclConfig:
        """The rules in force (re-read first when due and the file changed)."""
        now = self._clock()
        if now - self._checked_at < self._reload_interval_s:
            return self._config
        with self._lock:
            if now - self._checked_at >= self._reload_interval_s:
                self._checked_at = now
                self._maybe_reload()
        return self._config

    def _maybe_reload(self) -> None:
        stamp = self._file_stamp()
        if stamp is None:
            if not self._missing_logged:
                log.warning("ACL file %s is gone; the rules loaded before stay in force", self.path)
                self._missing_logged = True
            return
        self._missing_logged = False
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            config = load_plain_acl(self.path)
        except ConfigError as exc:
            log.error("ACL file changed but does not load (the rules loaded before stay in force): %s", exc)
            return
        self._config = config
        log.info("ACL file %s reloaded: %d accounts", self.path, len(config.accounts))

    def check(
        self,
        request: RemotingCommand,
        remote_host: str,
        admin_codes: frozenset[int] = ADMIN_CODES,
        *,
        strict_admin: bool = False,
    ) -> str | None:
        """None when allowed, else the reason (see :func:`decide`)."""
        return decide(self.config, request, remote_host, admin_codes, strict_admin=strict_admin)

    def refusal(
        self,
        request: RemotingCommand,
        remote_address: str,
        refusals: RateLimitedLog,
        admin_codes: frozenset[int] = ADMIN_CODES,
        *,
        strict_admin: bool = False,
    ) -> RemotingCommand | None:
        """The NO_PERMISSION answer to ``request`` from ``remote_address`` (``host:port``) when
        the rules refuse it, logged through ``refusals``; None when it may go on."""
        reason = self.check(request, host_of(remote_address), admin_codes, strict_admin=strict_admin)
        if reason is None:
            return None
        refusals.warning(reason, remote_address)
        return create_response(request, ResponseCode.NO_PERMISSION, reason)


class RateLimitedLog:
    """Logs a refusal at WARNING at most once per ``interval_s`` per reason, counting the rest."""

    def __init__(
        self, logger: logging.Logger, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._log = logger
        self._interval_s = interval_s
        self._clock = clock
        self._last: dict[str, tuple[float, int]] = {}

    def warning(self, reason: str, remote: str) -> None:
        now = self._clock()
        last = self._last.get(reason)
        if last is not None and now - last[0] < self._interval_s:
            self._last[reason] = (last[0], last[1] + 1)
            return
        suppressed = last[1] if last is not None else 0
        if len(self._last) > 1024:
            self._last.clear()
        self._last[reason] = (now, 0)
        extra = f" ({suppressed} more like it suppressed)" if suppressed else ""
        self._log.warning("ACL refused a request from %s: %s%s", remote, reason, extra)


__all__ = [
    "ADMIN_CODES",
    "NAMESRV_PROTECTED_CODES",
    "PERM_ANY",
    "PERM_DENY",
    "PERM_PUB",
    "PERM_SUB",
    "Account",
    "PlainAclConfig",
    "PlainAclValidator",
    "RateLimitedLog",
    "decide",
    "group_resource",
    "load_plain_acl",
    "needed_resources",
    "parse_perm",
    "parse_plain_acl",
    "perm_allows",
    "resolve_acl_file",
]
