"""Fuzzing the ACL parsers and checks: ``plain_acl.yml`` text (the YAML subset and the document
on it) raises only ConfigError, address patterns compile or raise ConfigError and their matchers
answer a bool for any host, and the request-side functions (resources a request needs, the
signature check, the decision) never raise for any request a peer can send."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from _support.fuzz import fuzz, only
from rocketq.acl.address import compile_address_pattern, host_of
from rocketq.acl.plain import decide, needed_resources, parse_plain_acl
from rocketq.acl.signature import server_content, sign_request, signature_matches
from rocketq.acl.yaml_subset import parse_yaml
from rocketq.errors import ConfigError
from rocketq.remoting import RemotingCommand, RequestCode

GOOD = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.{1,2}
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.1-100
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=PUB|SUB
    groupPerms: [groupA=SUB, "groupB=PUB"]
  - accessKey: 'rocketmq2'
    secretKey: "12345678"   # comment
    admin: true
"""
YAML_PIECES = [
    "a:",
    " b",
    "- ",
    "- x",
    "[a, b]",
    "{",
    "}",
    "'q'",
    '"\\u12"',
    "#",
    ":",
    "&x",
    "!tag",
    "|",
    "\t",
]


@st.composite
def mutated_yaml(draw: st.DrawFn) -> str:
    lines = GOOD.splitlines()
    for _ in range(draw(st.integers(1, 5))):
        at = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(["indent", "drop", "insert", "splice"]))
        if kind == "indent":
            lines[at] = " " * draw(st.integers(0, 9)) + lines[at].lstrip()
        elif kind == "drop" and len(lines) > 1:
            del lines[at]
        elif kind == "insert":
            pieces = draw(st.lists(st.sampled_from([*YAML_PIECES, "k", " ", "0"]), max_size=4))
            lines.insert(at, "".join(pieces))
        else:
            cut = draw(st.integers(0, len(lines[at])))
            lines[at] = lines[at][:cut] + draw(st.sampled_from(YAML_PIECES)) + lines[at][cut:]
    return "\n".join(lines)


@fuzz(300)
@given(st.one_of(st.text(max_size=300), mutated_yaml()))
def test_plain_acl_text_parses_or_raises_config_error(text: str) -> None:
    only((ConfigError,), parse_yaml, text)
    only((ConfigError,), parse_plain_acl, text)


def test_the_unmutated_document_parses() -> None:
    config = parse_plain_acl(GOOD)
    assert set(config.accounts) == {"RocketMQ", "rocketmq2"}


octet = st.one_of(
    st.integers(-1, 300).map(str), st.sampled_from(["*", "", "1-5", "5-1", "{1,2}", "{", "x", "01", "1-"])
)
patterns = st.one_of(
    st.text(max_size=40),
    st.lists(octet, min_size=1, max_size=6).map(".".join),
    st.lists(st.lists(octet, min_size=4, max_size=4).map(".".join), min_size=1, max_size=3).map(",".join),
    st.sampled_from(["::1", "fe80::1", "*:*:*:*:*:*:*:*", "[::1]", "::ffff:10.0.0.1"]),
)
hosts = st.one_of(
    st.text(max_size=30),
    st.lists(st.integers(0, 300).map(str), min_size=1, max_size=5).map(".".join),
    st.sampled_from(["::1", "fe80::1%eth0", "", "?"]),
)


@fuzz(300)
@given(patterns, st.lists(hosts, max_size=4))
def test_address_patterns_compile_or_raise_config_error_and_match_any_host(
    pattern: str, candidates: list[str]
) -> None:
    matcher = only((ConfigError,), compile_address_pattern, pattern)
    if matcher is not None:
        for host in candidates:
            assert matcher(host) in (True, False)
            assert isinstance(host_of(f"{host}:10911"), str)


ext_values = st.text(max_size=20)
ext_keys = st.one_of(
    st.sampled_from(["AccessKey", "Signature", "topic", "consumerGroup", "group", "b", "a", "producerGroup"]),
    st.text(max_size=10),
)


@st.composite
def requests(draw: st.DrawFn) -> RemotingCommand:
    codes = [int(c) for c in RequestCode]
    return RemotingCommand(
        code=draw(st.one_of(st.sampled_from(codes), st.integers(-(2**31), 2**31 - 1))),
        ext_fields=draw(st.dictionaries(ext_keys, ext_values, max_size=6)),
        body=draw(st.one_of(st.binary(max_size=80), st.just(b'{"consumerDataSet":[{"groupName":1}]}'))),
    )


CONFIG = parse_plain_acl(GOOD)


@fuzz(300)
@given(requests(), hosts, st.booleans())
def test_request_side_checks_never_raise(request: RemotingCommand, host: str, strict: bool) -> None:
    assert isinstance(needed_resources(request), dict)
    assert isinstance(server_content(request), bytes)
    assert signature_matches(request, "12345678") in (True, False)
    verdict = decide(CONFIG, request, host, strict_admin=strict)
    assert verdict is None or isinstance(verdict, str)
    sign_request(request, "RocketMQ", "12345678")
    assert signature_matches(request, "12345678")


def test_a_scoped_ipv6_peer_matches_its_address() -> None:
    # what getpeername gives for a link-local IPv6 peer; it made the matcher raise
    assert compile_address_pattern("fe80::1")("fe80::1%eth0")
    assert not compile_address_pattern("10.0.0.*")("::%0")
