"""The pure parts of plain ACL: the YAML subset, address patterns, the signature (vectors computed
with ``openssl dgst -sha1 -hmac``), the file format, the per-request decision and hot reload."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from rocketq.acl.address import compile_address_pattern
from rocketq.acl.plain import (
    PERM_ANY,
    PERM_PUB,
    PERM_SUB,
    PlainAclValidator,
    RateLimitedLog,
    decide,
    needed_resources,
    parse_perm,
    parse_plain_acl,
    perm_allows,
)
from rocketq.acl.signature import (
    AclClientRpcHook,
    calc_signature,
    combine_request_content,
    server_content,
    sign_request,
    signature_matches,
)
from rocketq.acl.yaml_subset import parse_yaml
from rocketq.errors import ConfigError
from rocketq.remoting.codes import RequestCode
from rocketq.remoting.command import RemotingCommand, create_request, decode_json_header, encode_json_header

# ----------------------------------------------------------------------------- the YAML subset

ROCKETMQ_SAMPLE = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
"""


def test_yaml_subset_reads_rocketmq_sample() -> None:
    doc = parse_yaml(ROCKETMQ_SAMPLE)
    assert doc["globalWhiteRemoteAddresses"] == ["10.10.103.*", "192.168.0.*"]
    first, second = doc["accounts"]
    assert first["secretKey"] == "12345678"  # a string, as the Java loader stores it
    assert first["whiteRemoteAddress"] is None
    assert first["topicPerms"] == ["topicA=DENY", "topicB=PUB|SUB", "topicC=SUB"]
    assert first["groupPerms"] == ["groupA=DENY", "groupB=PUB|SUB", "groupC=SUB"]
    assert second == {
        "accessKey": "rocketmq2",
        "secretKey": "12345678",
        "whiteRemoteAddress": "192.168.1.*",
        "admin": "true",
    }


def test_yaml_subset_double_quoted_escapes_keep_non_ascii() -> None:
    assert parse_yaml('k: "sëcret\\t\\u00e9\\""\n') == {"k": 'sëcret\té"'}
    with pytest.raises(ConfigError, match="unsupported escape"):
        parse_yaml('k: "bad \\q"\n')


def test_yaml_subset_quotes_flow_lists_and_unindented_sequences() -> None:
    doc = parse_yaml(
        "---\na: 'it''s # not a comment'\nb: \"x: y\"  # comment\nc: [p, 'q', ]\nd:\n- 1\n- two\ne: ~\n"
    )
    assert doc == {
        "a": "it's # not a comment",
        "b": "x: y",
        "c": ["p", "q", None],
        "d": ["1", "two"],
        "e": None,
    }


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a: 1\n  b: 2\n", "line 2"),
        ("a: 1\na: 2\n", "duplicate key 'a'"),
        ("a: &x 1\n", None),
        ("a: 'open\n", "unterminated"),
        ("just text\n", "expected 'key: value'"),
        ("a:\n\t- x\n", "tabs"),
    ],
)
def test_yaml_subset_rejects_what_it_cannot_read(text: str, words: str | None) -> None:
    if words is None:  # an anchor inside a value is a plain scalar here; only leading ones fail
        assert parse_yaml(text) == {"a": "&x 1"}
        return
    with pytest.raises(ConfigError, match=words):
        parse_yaml(text)


# ----------------------------------------------------------------------------- address patterns


@pytest.mark.parametrize(
    ("pattern", "yes", "no"),
    [
        ("*", ["1.2.3.4", "::1"], []),
        ("*.*.*.*", ["10.0.0.1"], []),
        ("", [], ["127.0.0.1"]),
        (None, [], ["127.0.0.1"]),
        ("192.168.0.1", ["192.168.0.1", "::ffff:192.168.0.1"], ["192.168.0.2"]),
        ("192.168.0.{1,2,3}", ["192.168.0.1", "192.168.0.3"], ["192.168.0.4", "192.168.1.1"]),
        ("192.168.0.1,10.0.0.2", ["10.0.0.2", "192.168.0.1"], ["10.0.0.1"]),
        ("192.168.0.*", ["192.168.0.0", "192.168.0.255"], ["192.168.1.1"]),
        ("192.168.*.*", ["192.168.7.9"], ["192.169.0.1"]),
        (
            "192.168.1.1-100",
            ["192.168.1.1", "192.168.1.100"],
            ["192.168.1.0", "192.168.1.101", "192.168.2.50"],
        ),
        ("10.1-5.*.*", ["10.1.0.0", "10.5.255.255"], ["10.6.0.1", "10.0.9.9"]),
        ("::1", ["::1", "0:0:0:0:0:0:0:1"], ["127.0.0.1"]),
    ],
)
def test_address_patterns(pattern: str | None, yes: list[str], no: list[str]) -> None:
    match = compile_address_pattern(pattern)
    assert [h for h in yes if match(h)] == yes
    assert [h for h in no if match(h)] == []


@pytest.mark.parametrize(
    "pattern",
    [
        "192.168.1",
        "192.168.1.300",
        "192.168.1.5-2",
        "192.168.*.5",
        "*.1.1.1",
        "192.168.1.x",
        "1.2.3.{a}",
        "1.2.3.4,zz",
    ],
)
def test_bad_address_patterns_are_refused(pattern: str) -> None:
    with pytest.raises(ConfigError, match="address pattern"):
        compile_address_pattern(pattern)


# ----------------------------------------------------------------------------- the signature


def test_signature_vectors_computed_with_openssl() -> None:
    # printf 'RocketMQ' | openssl dgst -sha1 -hmac 12345678 -binary | base64
    assert calc_signature(b"RocketMQ", "12345678") == "IUc8rrO/0gDch8CjObLQsW2rsiA="
    # non-ASCII content and key are UTF-8: printf 'ÄrocketmqX' | openssl ... -hmac 'sëcret1'
    assert calc_signature("ÄrocketmqX".encode(), "sëcret1") == "c5L2Hy5czg7iCMU2nop5K+rLVkI="


def test_content_is_sorted_values_then_body() -> None:
    # Java TreeMap order: upper case before lower case; keys themselves are not included.
    fields = {"topic": "T", "b": "x", "AccessKey": "rocketmq2", "a": "PG", "Signature": "ignored"}
    assert combine_request_content(fields, b"hello") == b"rocketmq2PGxThello"


def test_content_orders_keys_by_utf16_code_units_as_java() -> None:
    # U+1F600 is the surrogate pair D83D DE00 in Java, which sorts before U+FF01
    fields = {"\uff01": "second", "\U0001f600": "first", "A": "zero"}
    assert combine_request_content(fields, None) == b"zerofirstsecond"


def test_sign_request_matches_hand_computed_vector() -> None:
    cmd = create_request(RequestCode.SEND_MESSAGE_V2, {"topic": "T", "b": "x", "a": "PG"}, body=b"hello")
    sign_request(cmd, "rocketmq2", "12345678")
    # printf 'rocketmq2PGxThello' | openssl dgst -sha1 -hmac 12345678 -binary | base64
    assert cmd.ext_fields["Signature"] == "uPtGM1xDcX7+tqEX5lXygukNmQo="
    assert cmd.ext_fields["AccessKey"] == "rocketmq2"
    assert signature_matches(cmd, "12345678")
    assert not signature_matches(cmd, "12345679")


def test_signature_survives_the_wire_and_breaks_on_tampering() -> None:
    cmd = create_request(RequestCode.PULL_MESSAGE, {"topic": "T", "queueId": 3, "consumerGroup": "G"})
    AclClientRpcHook("rocketmq2", "12345678", security_token="tok")("127.0.0.1:10911", cmd)
    assert cmd.ext_fields["SecurityToken"] == "tok"
    received = decode_json_header(encode_json_header(cmd), cmd.body)
    assert signature_matches(received, "12345678")
    received.ext_fields["queueId"] = "4"
    assert not signature_matches(received, "12345678")
    unsigned = create_request(RequestCode.PULL_MESSAGE, {"topic": "T"})
    assert not signature_matches(unsigned, "12345678")


def test_server_leaves_unique_key_query_out_and_accepts_both_signatures() -> None:
    cmd = create_request(RequestCode.QUERY_MESSAGE, {"topic": "T", "key": "k", "_UNIQUE_KEY_QUERY": "true"})
    sign_request(cmd, "rocketmq2", "12345678")  # signed over the flag, as the Java client does
    assert b"true" not in server_content(cmd)
    assert signature_matches(cmd, "12345678")
    java_server_style = create_request(RequestCode.QUERY_MESSAGE, {"topic": "T", "key": "k"})
    sign_request(java_server_style, "rocketmq2", "12345678")
    java_server_style.ext_fields["_UNIQUE_KEY_QUERY"] = "true"
    assert signature_matches(java_server_style, "12345678")


def test_resigning_replaces_the_old_signature() -> None:
    cmd = create_request(RequestCode.HEART_BEAT, body=b"{}")
    sign_request(cmd, "rocketmq2", "12345678")
    first = cmd.ext_fields["Signature"]
    sign_request(cmd, "rocketmq2", "12345678")  # a retried request goes through the hook again
    assert cmd.ext_fields["Signature"] == first


# ----------------------------------------------------------------------------- the file


def test_plain_acl_file_parses_to_accounts() -> None:
    cfg = parse_plain_acl(ROCKETMQ_SAMPLE)
    assert cfg.global_white_remote_addresses == ("10.10.103.*", "192.168.0.*")
    assert cfg.globally_white("10.10.103.7") and not cfg.globally_white("10.10.104.7")
    plain = cfg.accounts["RocketMQ"]
    assert not plain.admin
    assert plain.owned_perm("topicB") == PERM_PUB | PERM_SUB
    assert plain.owned_perm("unlisted") == parse_perm("DENY")
    assert plain.owned_perm("%RETRY%groupC") == PERM_SUB
    assert plain.owned_perm("%RETRY%other") == PERM_SUB  # defaultGroupPerm
    admin = cfg.accounts["rocketmq2"]
    assert admin.admin and admin.resource_perms is None and admin.white_match("192.168.1.20")
    assert "12345678" not in repr(admin)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("accounts:\n  - accessKey: short\n    secretKey: 12345678\n", "longer than 6"),
        ("accounts:\n  - accessKey: rocketmq2\n", "required"),
        ("accounts:\n  - accessKey: rocketmq2\n    secretKey: 12345678\n    topicPerms: [T]\n", "name=PERM"),
        ("accounts:\n  - accessKey: rocketmq2\n    secretKey: 12345678\n    admin: yes\n", "true or false"),
        (
            "accounts:\n  - accessKey: rocketmq2\n    secretKey: 12345678\n"
            "  - accessKey: rocketmq2\n    secretKey: 87654321\n",
            "twice",
        ),
        ("globalWhiteRemoteAddresses: [1.2.3]\n", "globalWhiteRemoteAddresses"),
        ("- a\n", "mapping at the top level"),
    ],
)
def test_bad_files_are_refused(text: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        parse_plain_acl(text)


def test_perm_rules() -> None:
    assert parse_perm("SUB|PUB") == PERM_PUB | PERM_SUB
    assert parse_perm("pub") == parse_perm("DENY") == parse_perm(None)
    assert perm_allows(PERM_PUB, PERM_PUB | PERM_SUB)
    assert not perm_allows(PERM_PUB, PERM_SUB)
    assert perm_allows(PERM_ANY, PERM_SUB) and perm_allows(PERM_ANY, PERM_PUB)
    assert not perm_allows(PERM_ANY, parse_perm("DENY"))


# ----------------------------------------------------------------------------- the decision

RULES = parse_plain_acl(
    """\
globalWhiteRemoteAddresses: [10.9.9.*]
accounts:
  - accessKey: pubonly1
    secretKey: pubsecret1
    defaultTopicPerm: PUB
    defaultGroupPerm: DENY
  - accessKey: subonly1
    secretKey: subsecret1
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
    topicPerms: [secret=DENY]
    groupPerms: [blocked=DENY]
  - accessKey: trusted1
    secretKey: trustsecret
    whiteRemoteAddress: 10.1.1.1
  - accessKey: adminacct
    secretKey: adminsecret
    admin: true
"""
)


def _signed(code: int, fields: dict[str, object], ak: str, sk: str, body: bytes = b"") -> RemotingCommand:
    cmd = create_request(code, fields, body)
    sign_request(cmd, ak, sk)
    return cmd


def test_needed_resources_per_code() -> None:
    v2 = create_request(RequestCode.SEND_MESSAGE_V2, {"a": "PG", "b": "T"})
    assert needed_resources(v2) == {"T": PERM_PUB}
    retry = create_request(RequestCode.SEND_MESSAGE, {"producerGroup": "G", "topic": "%RETRY%G"})
    assert needed_resources(retry) == {"%RETRY%G": PERM_SUB}
    pull = create_request(RequestCode.PULL_MESSAGE, {"topic": "T", "consumerGroup": "G"})
    assert needed_resources(pull) == {"T": PERM_SUB, "%RETRY%G": PERM_SUB}
    back = create_request(RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "G", "originTopic": "T"})
    assert needed_resources(back) == {"%RETRY%G": PERM_SUB, "T": PERM_ANY}
    body = json.dumps(
        {
            "clientID": "c",
            "producerDataSet": [{"groupName": "PG"}],
            "consumerDataSet": [
                {"groupName": "G", "subscriptionDataSet": [{"topic": "T"}, {"topic": "%RETRY%G"}]}
            ],
        }
    ).encode()
    hb = create_request(RequestCode.HEART_BEAT, body=body)
    assert needed_resources(hb) == {"%RETRY%G": PERM_SUB, "T": PERM_SUB}
    assert needed_resources(create_request(RequestCode.HEART_BEAT, body=b"not json")) == {}
    assert needed_resources(create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})) == {}


def test_decision_table() -> None:
    host = "127.0.0.1"
    send = {"a": "PG", "b": "T"}
    pull = {"topic": "T", "consumerGroup": "G"}
    cases: list[tuple[RemotingCommand, str, str | None]] = [
        (create_request(RequestCode.SEND_MESSAGE_V2, send), host, "No accessKey"),
        (create_request(RequestCode.SEND_MESSAGE_V2, send), "10.9.9.4", None),  # globally white
        (
            _signed(RequestCode.SEND_MESSAGE_V2, send, "nobody12", "whatever1"),
            host,
            "No acl config for accessKey nobody12",
        ),
        (
            _signed(RequestCode.SEND_MESSAGE_V2, send, "pubonly1", "wrongsecret"),
            host,
            "signature mismatch for accessKey pubonly1",
        ),
        (_signed(RequestCode.SEND_MESSAGE_V2, send, "pubonly1", "pubsecret1"), host, None),
        (
            _signed(RequestCode.PULL_MESSAGE, pull, "pubonly1", "pubsecret1"),
            host,
            "No permission to SUB topic T for accessKey pubonly1",
        ),
        (
            _signed(RequestCode.SEND_MESSAGE_V2, send, "subonly1", "subsecret1"),
            host,
            "No permission to PUB topic T for accessKey subonly1",
        ),
        (_signed(RequestCode.PULL_MESSAGE, pull, "subonly1", "subsecret1"), host, None),
        (
            _signed(
                RequestCode.PULL_MESSAGE, {"topic": "secret", "consumerGroup": "G"}, "subonly1", "subsecret1"
            ),
            host,
            "No permission to SUB topic secret",
        ),
        (
            _signed(
                RequestCode.PULL_MESSAGE, {"topic": "T", "consumerGroup": "blocked"}, "subonly1", "subsecret1"
            ),
            host,
            "No permission to SUB group blocked",
        ),
        (
            _signed(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "T"}, "subonly1", "subsecret1"),
            host,
            "request code 215 (DELETE_TOPIC_IN_BROKER): accessKey subonly1 is not admin",
        ),
        (
            _signed(
                RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                {"topic": "T", "group": "G"},
                "subonly1",
                "subsecret1",
            ),
            host,
            "is not admin",
        ),
        (_signed(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "T"}, "adminacct", "adminsecret"), host, None),
        (_signed(RequestCode.PULL_MESSAGE, pull, "adminacct", "adminsecret"), host, None),
        # the account's white address passes without a signature; elsewhere it must sign
        (create_request(RequestCode.PULL_MESSAGE, {**pull, "AccessKey": "trusted1"}), "10.1.1.1", None),
        (
            create_request(RequestCode.PULL_MESSAGE, {**pull, "AccessKey": "trusted1"}),
            host,
            "signature mismatch",
        ),
    ]
    for request, remote, expected in cases:
        verdict = decide(RULES, request, remote)
        if expected is None:
            assert verdict is None, (request, verdict)
        else:
            assert verdict is not None and expected in verdict, (request, verdict)


def test_validator_reloads_a_changed_file_at_most_once_per_interval(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text("accounts:\n  - accessKey: rocketmq2\n    secretKey: 12345678\n    admin: true\n")
    now = [100.0]
    validator = PlainAclValidator(path, reload_interval_s=1.0, clock=lambda: now[0])
    request = _signed(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "T"}, "rocketmq2", "12345678")
    assert validator.check(request, "127.0.0.1") is None

    path.write_text("accounts:\n  - accessKey: rocketmq2\n    secretKey: 12345678\n    admin: false\n")
    os.utime(path, ns=(1, 2_000_000_000))  # a distinct mtime even on coarse file systems
    now[0] += 0.5
    assert validator.check(request, "127.0.0.1") is None  # not due yet
    now[0] += 0.6
    verdict = validator.check(request, "127.0.0.1")
    assert verdict is not None and "not admin" in verdict

    path.write_text("accounts: [\n")  # a broken edit keeps the rules in force
    os.utime(path, ns=(1, 3_000_000_000))
    now[0] += 1.1
    assert validator.config.accounts["rocketmq2"].admin is False
    path.unlink()
    now[0] += 1.1
    assert "rocketmq2" in validator.config.accounts


def test_validator_refuses_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read ACL file"):
        PlainAclValidator(tmp_path / "absent.yml")


def test_refusal_log_is_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    limited = RateLimitedLog(logging.getLogger("test.acl"), interval_s=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="test.acl"):
        for _ in range(5):
            limited.warning("signature mismatch for accessKey x", "1.2.3.4:5")
        now[0] = 11.0
        limited.warning("signature mismatch for accessKey x", "1.2.3.4:5")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "4 more like it suppressed" in lines[1]
