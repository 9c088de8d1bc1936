"""RouteTable.displacement: when a (un)registration would displace a live broker."""

from __future__ import annotations

from rocketq.namesrv import RouteTable
from rocketq.protocol.route import DataVersion

DV = DataVersion(counter=1, timestamp_ms=1_700_000_000_000)


def registered(channel: object, addr: str = "10.0.0.1:10911", broker_id: int = 0) -> RouteTable:
    table = RouteTable()
    table.register_broker("C", "broker-a", addr, broker_id, None, {}, DV, 0, 10_000, channel=channel)
    return table


def test_unknown_names_and_the_broker_itself_displace_nothing() -> None:
    real = object()
    table = registered(real)
    assert table.displacement("C", "broker-b", "10.6.6.6:10911", 0, object(), 1000) is None
    assert table.displacement("C", "broker-a", "10.0.0.1:10911", 0, real, 1000) is None  # its own channel
    assert table.displacement("C", "broker-a", "10.0.0.2:10911", 1, object(), 1000) is None  # a slave id


def test_another_address_for_a_live_name_and_id_is_a_displacement_until_it_expires() -> None:
    table = registered(object())
    found = table.displacement("C", "broker-a", "10.6.6.6:10911", 0, object(), 1000)
    assert found is not None and not found.other_connection
    assert found.reason == "broker broker-a/0 is live at 10.0.0.1:10911"
    assert table.displacement("C", "broker-a", "10.6.6.6:10911", 0, object(), 10_001) is None  # expired


def test_the_same_address_on_another_channel_is_a_displacement() -> None:
    table = registered(object())
    found = table.displacement("C", "broker-a", "10.0.0.1:10911", 0, object(), 1000)
    assert found is not None and found.other_connection
    assert found.reason == "the broker at 10.0.0.1:10911 is live on another connection"
    # an unregistration naming another id or broker name, or another cluster, is caught too
    for name, broker_id, cluster in (("broker-a", 5, "C"), ("broker-z", 0, "C"), ("broker-a", 0, "Other")):
        found = table.displacement(cluster, name, "10.0.0.1:10911", broker_id, object(), 1000)
        assert found is not None and found.other_connection, (name, broker_id, cluster)


def test_a_closed_channel_frees_the_name() -> None:
    real = object()
    table = registered(real)
    table.on_channel_closed(real)
    assert table.displacement("C", "broker-a", "10.6.6.6:10911", 0, object(), 1000) is None


def test_a_dledger_master_of_a_higher_term_takes_over_from_a_live_one() -> None:
    """A new DLedger leader registers as master while the old one, paused or cut off from its
    peers, still holds brokerId 0 on a live connection: the higher term wins; an equal or lower
    term, a missing term, or a slave id does not."""
    table = RouteTable()
    old = object()
    table.register_broker("C", "broker-a", "10.0.0.1:10911", 0, None, {}, DV, 0, 10_000, channel=old, term=2)
    new = "10.0.0.2:10911"
    assert table.displacement("C", "broker-a", new, 0, object(), 1000, term=3) is None
    for term in (None, 1, 2):
        found = table.displacement("C", "broker-a", new, 0, object(), 1000, term=term)
        assert found is not None and found.reason == "broker broker-a/0 is live at 10.0.0.1:10911", term
    plain = registered(object())  # a holder that sent no term (not a DLedger broker) keeps its id
    assert plain.displacement("C", "broker-a", new, 0, object(), 1000, term=9) is not None
    # the new master registers; the old one, still believing it leads in term 2, is refused
    table.register_broker("C", "broker-a", new, 0, None, {}, DV, 1000, 10_000, channel=object(), term=3)
    assert table.displacement("C", "broker-a", "10.0.0.1:10911", 0, old, 1500, term=2) is not None
