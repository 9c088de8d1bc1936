"""A batch message's record properties taken as sent (the send path's shortcut) are byte for
byte what building and encoding its property map gives, whatever the properties' bytes."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from _support.examples import examples
from rocketq.broker.send_properties import batch_entry_properties, cluster_property, properties_as_sent
from rocketq.errors import MessageIllegal
from rocketq.message import decode_properties, encode_properties

NAMES = ["UNIQ_KEY", "WAIT", "TAGS", "KEYS", "CLUSTER", "POP_CK", "DELAY", "a", "é"]
# names and values with the separators, empty strings, non-ASCII and lone surrogates among them
parts = st.one_of(
    st.sampled_from(NAMES), st.text(max_size=6), st.sampled_from(["", "\x01", "\x02", "0", "3"])
)

clean = st.one_of(
    st.sampled_from(["WAIT", "TAGS", "x"]),
    st.text(
        st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]), min_size=1, max_size=6
    ),
)


@st.composite
def property_bytes(draw: st.DrawFn) -> bytes:
    """Mostly well-formed ``name\\x01value\\x02`` lists, sometimes damaged or arbitrary bytes."""
    if draw(st.booleans()):  # as clients send them: distinct names, a UNIQ_KEY among them
        some = draw(st.sampled_from([parts, clean]))
        props = draw(st.dictionaries(some, some, max_size=5))
        props[draw(st.sampled_from(["UNIQ_KEY", "UNIQ_KEY", "WAIT"]))] = draw(
            st.sampled_from(["ID", "", "\x02"])
        )
        pieces = list(props.items())
        if draw(st.booleans()):
            pieces = pieces[::-1]
    else:
        pieces = draw(st.lists(st.tuples(parts, parts), max_size=6))
    text = "".join(f"{k}\x01{v}\x02" for k, v in pieces)
    raw = text.encode("utf-8", "surrogatepass")
    how = draw(st.integers(0, 5))
    if how == 1:  # cut anywhere
        raw = raw[: draw(st.integers(0, len(raw)))]
    elif how == 2:  # junk inserted (invalid UTF-8 included)
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.binary(max_size=4)) + raw[at:]
    elif how == 3:
        raw = draw(st.binary(max_size=40))
    return raw


shared_maps = st.dictionaries(
    st.sampled_from(["WAIT", "TAGS", "CLUSTER", "x"]), st.text(max_size=4), max_size=2
)
clusters = st.one_of(st.sampled_from(["DefaultCluster", "", "c\x01", "ü"]), st.text(max_size=8))


@settings(max_examples=examples(500))
@given(property_bytes(), shared_maps, clusters)
# a delay level in a digit that is not ASCII ('¹': str.isdigit() is true, int() refuses it)
@example(raw=b"DELAY\x01\xc2\xb9\x02", shared={}, cluster="DefaultCluster")
def test_properties_as_sent_are_what_the_general_path_writes(
    raw: bytes, shared: dict[str, str], cluster: str
) -> None:
    suffix = cluster_property(cluster)
    if suffix is None:  # the send path takes the general path for such a cluster name
        assert "\x01" in cluster or "\x02" in cluster or not _utf8(cluster)
        return
    text = raw.decode("utf-8", "replace")
    fast = properties_as_sent(raw, text, decode_properties(text), shared, suffix)
    ids: list[str] = []

    def new_id() -> str:
        ids.append("ID")
        return "ID"

    try:
        general: bytes | None = batch_entry_properties(decode_properties(text), shared, cluster, new_id, 0)
    except MessageIllegal:
        general = None  # refused (a delay level, a separator in a name or value)
    if fast is not None:
        assert fast == general
        assert ids == []  # the message had its UNIQ_KEY
        if cluster:  # an empty value is written ("CLUSTER\x01\x02") but does not decode
            assert decode_properties(fast.decode()) == {**decode_properties(text), "CLUSTER": cluster}


def test_the_usual_client_batch_message_is_taken_as_sent() -> None:
    raw = encode_properties({"TAGS": "T", "UNIQ_KEY": "7F0000010001ABCD", "WAIT": "true"}).encode()
    suffix = cluster_property("DefaultCluster")
    assert suffix == b"CLUSTER\x01DefaultCluster\x02"
    text = raw.decode()
    assert properties_as_sent(raw, text, decode_properties(text), {"WAIT": "true"}, suffix) == raw + suffix
    # a batch-wide property the message lacks, or a CLUSTER of its own: the general path
    assert properties_as_sent(raw, text, decode_properties(text), {"KEYS": "k"}, suffix) is None
    with_cluster = raw + b"CLUSTER\x01other\x02"
    wc = with_cluster.decode()
    assert properties_as_sent(with_cluster, wc, decode_properties(wc), {}, suffix) is None


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
