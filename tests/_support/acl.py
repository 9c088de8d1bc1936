"""Accounts and ``plain_acl.yml`` texts of the ACL tests, and the signed client setup they share:
an admin account, a PUB-only one and a SUB-only one; ``acl_yaml`` builds other rule files."""

from __future__ import annotations

import pathlib

from rocketq.client.config import ClientConfig

Keys = tuple[str, str]

ADMIN: Keys = ("adminkey1", "adminsecret1")
PUB_ONLY: Keys = ("pubonly1", "pubsecret1")
SUB_ONLY: Keys = ("subonly1", "subsecret1")


def account(keys: Keys, topic_perm: str | None = None, group_perm: str | None = None) -> str:
    """One entry of ``accounts:``; without permissions the account is an admin."""
    text = f"  - accessKey: {keys[0]}\n    secretKey: {keys[1]}\n"
    if topic_perm is None and group_perm is None:
        return text + "    admin: true\n"
    return text + f"    defaultTopicPerm: {topic_perm}\n    defaultGroupPerm: {group_perm}\n"


def acl_yaml(*accounts: str) -> str:
    return "accounts:\n" + "".join(accounts)


ACL_FILE = acl_yaml(account(ADMIN), account(PUB_ONLY, "PUB", "DENY"), account(SUB_ONLY, "SUB", "SUB"))


def write_acl_file(directory: pathlib.Path, text: str = ACL_FILE) -> pathlib.Path:
    acl_file = directory / "plain_acl.yml"
    acl_file.write_text(text, encoding="utf-8")
    return acl_file


def acl_broker_conf(directory: pathlib.Path, text: str = ACL_FILE, keys: Keys = ADMIN) -> dict[str, str]:
    """Writes ``plain_acl.yml`` in ``directory``; the broker keys of a server with ACL on that signs
    its own requests with ``keys``."""
    acl_file = write_acl_file(directory, text)
    return {"aclEnable": "true", "aclFile": str(acl_file), "accessKey": keys[0], "secretKey": keys[1]}


def signed_config(namesrv_addr: str, keys: Keys | None = ADMIN) -> ClientConfig:
    if keys is None:
        return ClientConfig(namesrv_addr=namesrv_addr, access_key=None, secret_key=None)
    return ClientConfig(namesrv_addr=namesrv_addr, access_key=keys[0], secret_key=keys[1])
