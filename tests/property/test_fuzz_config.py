"""Fuzzing the configuration loaders: Java ``.properties`` text (``broker.conf``,
``namesrv.conf``) parses into a dict for any text, and building BrokerConfig, StoreConfig and
NamesrvConfig from any values of their keys either succeeds or raises ConfigError naming the
problem, never another exception; the same for a whole broker.conf file on disk."""

from __future__ import annotations

import dataclasses
import pathlib
import tempfile

from hypothesis import given
from hypothesis import strategies as st

from _support.fuzz import fuzz, only
from rocketq.broker.config import BrokerConfig, broker_config_from_properties, load_broker_conf
from rocketq.config import StoreConfig, from_rocketmq_properties
from rocketq.errors import ConfigError
from rocketq.namesrv.config import NamesrvConfig, rocketmq_key
from rocketq.properties import parse_properties


def keys_of(cls: type) -> list[str]:
    return sorted({rocketmq_key(f.name) for f in dataclasses.fields(cls)} | {"brokerIP1", "brokerIP2"})


KEYS = sorted(set(keys_of(BrokerConfig) + keys_of(StoreConfig) + keys_of(NamesrvConfig)))
values = st.one_of(
    st.text(max_size=12),
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["true", "FALSE", "1e3", "0x10", " 7 ", "-0", "NaN", "SYNC_FLUSH", "", "1_000"]),
)
PROPERTY_PIECES = ["=", ":", " ", "\\", "\\\n", "\\u00e9", "\\u12", "#", "!", "\n", "\r\n", "\t", "a", "k=v"]


@fuzz(300)
@given(st.one_of(st.text(max_size=200), st.lists(st.sampled_from(PROPERTY_PIECES), max_size=30).map("".join)))
def test_properties_text_always_parses(text: str) -> None:
    props = parse_properties(text)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in props.items())


@fuzz(300)
@given(st.dictionaries(st.sampled_from(KEYS), values, max_size=8))
def test_any_values_of_known_keys_build_a_config_or_raise_config_error(props: dict[str, str]) -> None:
    broker = only((ConfigError,), broker_config_from_properties, props, broker_name="b")
    if broker is not None:
        broker.server_limits()
        broker.listen_warnings()
    only((ConfigError,), from_rocketmq_properties, StoreConfig, props)
    namesrv = only((ConfigError,), NamesrvConfig.from_rocketmq_properties, props)
    if namesrv is not None:
        assert namesrv.to_rocketmq_properties()


@fuzz(100)
@given(st.dictionaries(st.sampled_from(KEYS), values, max_size=6), st.sampled_from(["=", ": ", " "]))
def test_a_broker_conf_file_loads_or_raises_config_error(props: dict[str, str], sep: str) -> None:
    text = "".join(f"{k}{sep}{v.replace(chr(92), '/')}\n" for k, v in props.items())
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "broker.conf"
        path.write_text(text, encoding="utf-8")
        only((ConfigError,), load_broker_conf, path)
