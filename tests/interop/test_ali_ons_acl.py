"""ali-ons 3.12.0 with ``accessKeyId``/``accessKeySecret`` against a broker with
``aclEnable=true``: its signatures (the same HMAC-SHA1 over the sorted header values and the
body, with its ``OnsChannel`` field) are accepted, a wrong secret is refused."""

from __future__ import annotations

import pathlib

from ali_ons_harness import Interop
from test_ali_ons import has_all, message_list

from _support.acl import ADMIN, account, acl_yaml, write_acl_file

ONS_USER = ("onsuser1", "onssecret1")
ACL_FILE = acl_yaml(account(ADMIN), account(ONS_USER, "PUB|SUB", "SUB"))


def test_ali_ons_signs_sends_and_pulls_on_an_acl_broker(
    node_bin: str, ali_ons_module: str, tmp_path: pathlib.Path
) -> None:
    acl_file = write_acl_file(tmp_path, ACL_FILE)
    broker_conf = {"aclEnable": "true", "aclFile": str(acl_file)}
    interop = Interop(node_bin, ali_ons_module, tmp_path, broker_conf=broker_conf, acl_keys=ADMIN)
    try:
        topic, group = "InteropAcl", "interop_acl_group"
        interop.create_topic(topic, queues=2)  # signed by the admin account
        consumer = interop.start_consumer("consumer", topic, group, "*", acl_keys=ONS_USER)
        consumer.wait_ready()
        messages = message_list("acl", 6)
        sent = interop.produce(topic, messages, acl_keys=ONS_USER)
        assert len(sent) == 6
        bodies = {m["body"] for m in messages}
        consumer.wait_until(lambda _: has_all(bodies, consumer), 30.0, "every message consumed")
        assert consumer.unexpected_errors() == []

        refused = interop.run_producer(topic, message_list("bad", 1), acl_keys=(ONS_USER[0], "wrongsecret"))
        assert refused.proc.returncode != 0
        assert refused.of("error") and not refused.of("sent"), refused.diagnostics()
        # ali-ons' error names no remark; the broker's WARNING line says what was refused
        assert "signature mismatch for accessKey onsuser1" in interop.serve.log_text(None)
    finally:
        interop.close()
