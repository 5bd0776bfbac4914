"""Topic schemas (issue 42): a JSON Schema or a Python validator per topic;
invalid payloads raise SchemaError or go to $dlq/<topic>, flagged
Position.dead_lettered; messages carry their schema version."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import pytest

import rill

ORDER = {
    "type": "object",
    "required": ["id", "status"],
    "properties": {"id": {"type": "integer"}, "status": {"enum": ["new", "paid"]}},
}


def read_all(b: rill.Broker, topic: str) -> list[rill.Message]:
    c = b.consumer("reader", topic)
    out: list[rill.Message] = []
    while batch := c.poll(256, 0.5):
        out.extend(batch)
    c.close()
    return out


def test_json_schema_rejects_with_path_and_keyword(broker: rill.Broker) -> None:
    broker.create_topic("orders")
    assert broker.schema_version("orders") == 0
    assert broker.set_schema("orders", json_schema=ORDER) == 1
    assert broker.publish("orders", b'{"id": 1, "status": "new"}') == (0, 0)
    with pytest.raises(rill.SchemaError) as e:
        broker.publish("orders", b'{"id": 1, "status": "lost"}')
    assert "/status" in str(e.value) and "enum" in str(e.value)
    assert isinstance(e.value, rill.RillError)
    with pytest.raises(rill.SchemaError, match="not JSON"):
        broker.publish("orders", "not json", key="k")
    with pytest.raises(rill.SchemaError, match="record 1"):
        broker.publish_batch("orders", [b'{"id": 2, "status": "new"}', b"{}"])
    assert broker.topic_stats("orders").publish_count == 1
    # A schema as text, and bad ones.
    assert broker.set_schema("orders", json_schema='{"type": "integer"}') == 2
    broker.publish("orders", "5")
    with pytest.raises(rill.InvalidArgument, match="JSON schema"):
        broker.set_schema("orders", json_schema='{"type": 5}')
    with pytest.raises(rill.InvalidArgument):
        broker.set_schema("orders", json_schema=ORDER, on_invalid="drop")  # type: ignore[arg-type]
    with pytest.raises(rill.InvalidArgument):
        broker.set_schema("orders")
    assert broker.schema_version("orders") == 2
    broker.remove_schema("orders")
    assert broker.schema_version("orders") == 0
    broker.publish("orders", "anything")
    versions = [m.schema_version for m in read_all(broker, "orders")]
    assert versions == [1, 2, 0]


def test_dead_letter_flags_the_position(broker: rill.Broker) -> None:
    broker.create_topic("orders")
    broker.set_schema("orders", json_schema=ORDER, on_invalid="dead_letter")
    pos = broker.publish("orders", b'{"id": "x", "status": "new"}')
    assert pos.dead_lettered and pos == (0, 0)
    partition, offset = pos
    assert (partition, offset) == (0, 0)
    good = broker.publish("orders", b'{"id": 1, "status": "new"}')
    assert not good.dead_lettered
    done = broker.publish_batch("orders", [b'{"id": 2, "status": "paid"}', b"[]"])
    assert [p.dead_lettered for p in done] == [False, True]
    assert "dead_lettered=True" in repr(done[1])
    dead = read_all(broker, "$dlq/orders")
    assert [m.payload for m in dead] == [b'{"id": "x", "status": "new"}', b"[]"]
    assert "/id" in dead[0].attributes["rill.dlq.reason"]
    assert dead[0].attributes["rill.dlq.topic"] == "orders"


def test_a_python_validator(broker: rill.Broker) -> None:
    broker.create_topic("orders")

    def short(payload: bytes) -> bool | str | None:
        if payload == b"boom":
            raise ValueError("cannot parse")
        if payload == b"no":
            return False
        return None if len(payload) <= 8 else f"{len(payload)} bytes; at most 8"

    assert broker.set_schema("orders", validator=short) == 1
    broker.publish("orders", b"fine")
    with pytest.raises(rill.SchemaError, match="13 bytes; at most 8"):
        broker.publish("orders", b"much too long")
    with pytest.raises(rill.SchemaError, match="validator raised ValueError: cannot parse"):
        broker.publish("orders", b"boom")
    with pytest.raises(rill.SchemaError, match="returned False"):
        broker.publish("orders", b"no")
    broker.set_schema("orders", validator=short, on_invalid="dead_letter")
    assert broker.publish("orders", b"boom").dead_lettered
    assert read_all(broker, "$dlq/orders")[0].attributes["rill.dlq.reason"].startswith("validator raised")
    broker.remove_schema("orders")
    broker.publish("orders", b"much too long")


def test_replaced_while_threads_publish(broker: rill.Broker) -> None:
    broker.create_topic("race")
    only = {1: b'{"v": "a"}', 0: b'{"v": "b"}'}

    def schema(version: int) -> dict[str, object]:
        v = "a" if version % 2 else "b"
        return {"type": "object", "required": ["v"], "properties": {"v": {"const": v}}}

    broker.set_schema("race", json_schema=schema(1))
    errors: list[BaseException] = []

    def publish(i: int) -> None:
        try:
            for n in range(300):
                with contextlib.suppress(rill.SchemaError):
                    broker.publish("race", only[(n + i) % 2])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=publish, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for version in range(2, 21):
        assert broker.set_schema("race", json_schema=schema(version)) == version
    for t in threads:
        t.join()
    assert not errors
    read = read_all(broker, "race")
    assert read
    for m in read:
        assert m.schema_version > 0 and m.payload == only[m.schema_version % 2]


def test_a_durable_schema_survives_a_restart(tmp_path: Path) -> None:
    with rill.Broker(data_dir=str(tmp_path)) as b:
        b.create_topic("orders")
        b.set_schema("orders", json_schema=ORDER, on_invalid="dead_letter")
        b.create_topic("sized")
        b.set_schema("sized", validator=lambda p: len(p) < 2)
    with rill.Broker(data_dir=str(tmp_path)) as b:
        assert b.schema_version("orders") == 1
        assert b.publish("orders", b"{}").dead_lettered
        assert b.schema_version("sized") == 0
        b.publish("sized", b"long enough")


class _Validator:
    def __call__(self, payload: bytes) -> bool:
        return True


def test_a_validator_is_released_with_its_schema_topic_or_broker() -> None:
    """The callable (and what it holds) goes once the library lets go of it:
    at once when its schema is replaced, and with the broker for a deleted
    topic's (whose memory the broker lets go of later) and a kept one's."""
    import gc
    import weakref

    refs = []
    with rill.Broker() as b:
        for topic in ("replaced", "deleted", "kept"):
            b.create_topic(topic)
            v = _Validator()
            refs.append(weakref.ref(v))
            b.set_schema(topic, validator=v)
            b.publish(topic, b"x")
            del v
        b.set_schema("replaced", json_schema={"type": "string"})
        b.delete_topic("deleted")
        gc.collect()
        assert refs[0]() is None, "a replaced validator was not released"
        assert refs[2]() is not None
    del b
    gc.collect()
    assert [r() is None for r in refs] == [True, True, True], "the broker did not release its validators"
    # A set that fails releases the validator too.
    with rill.Broker() as b:
        v = _Validator()
        ref = weakref.ref(v)
        with pytest.raises(rill.NoSuchTopic):
            b.set_schema("missing", validator=v)
        del v
        gc.collect()
        assert ref() is None
