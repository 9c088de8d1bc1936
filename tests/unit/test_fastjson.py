from __future__ import annotations

import pathlib

import pytest

from rocketq.protocol import fastjson

ROCKETMQ_OFFSETS = (
    '{\n\t"offsetTable":{\n\t\t"TopicTest@please_rename_unique_group_name_4":'
    "{0:250,1:250,2:250,3:250\n\t\t}\n\t}\n}"
)


def test_reads_fastjson_unquoted_int_keys() -> None:
    data = fastjson.loads(ROCKETMQ_OFFSETS)
    assert data["offsetTable"]["TopicTest@please_rename_unique_group_name_4"] == {
        "0": 250,
        "1": 250,
        "2": 250,
        "3": 250,
    }


def test_does_not_touch_numbers_inside_strings_or_values() -> None:
    text = '{"a":"x,1:2",-3:[1,2,{4:5}],"b":{7 :8}}'
    assert fastjson.loads(text) == {"a": "x,1:2", "-3": [1, 2, {"4": 5}], "b": {"7": 8}}
    assert fastjson.loads('{"s":"quote \\" {1:2}"}') == {"s": 'quote " {1:2}'}


def test_writes_fastjson_style_and_round_trips() -> None:
    obj = {"offsetTable": {1: 5, 2: 0}, "name": "t", "list": [1, "a"], "empty": {}}
    text = fastjson.dumps(obj)
    assert "\t\t1:5," in text and '"name":"t"' in text and ": " not in text
    back = fastjson.loads(text)
    assert back == {"offsetTable": {"1": 5, "2": 0}, "name": "t", "list": [1, "a"], "empty": {}}


def test_persist_keeps_backup_and_load_falls_back(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "config" / "x.json")
    fastjson.persist(path, fastjson.dumps({"v": 1}))
    fastjson.persist(path, fastjson.dumps({"v": 2}))
    assert fastjson.load_file(path) == {"v": 2}
    assert fastjson.load_file(path + ".bak") == {"v": 1}
    pathlib.Path(path).write_text("{corrupt")
    assert fastjson.load_file(path) == {"v": 1}
    pathlib.Path(path).write_text("")
    assert fastjson.load_file(path) == {"v": 1}
    assert fastjson.load_file(str(tmp_path / "missing.json")) is None


@pytest.mark.parametrize("bad", ["{1:}", "[1:2]"])
def test_invalid_json_still_fails(bad: str) -> None:
    with pytest.raises(ValueError):
        fastjson.loads(bad)
