"""Settings for one kind of client: ``consumer.``, ``producer.`` and ``admin.`` prefixes, as
Kafka Streams has them. A consumer-only setting reaches no producer (librdkafka warns there:
``CONFWARN ... is a consumer property and will be ignored by this producer instance``)."""

from __future__ import annotations

from goka.kafka.config import admin_config, consumer_config, producer_config, scoped


def test_a_scoped_setting_goes_to_its_clients_only_without_its_prefix() -> None:
    user = {"consumer.fetch.wait.max.ms": 7, "producer.linger.ms": 3, "admin.socket.timeout.ms":
            9000, "client.id": "app"}  # fmt: skip
    consumer, producer = consumer_config("b:9092", user), producer_config("b:9092", user)
    admin = admin_config("b:9092", user)
    assert consumer["fetch.wait.max.ms"] == 7 and "linger.ms" not in consumer
    assert producer["linger.ms"] == 3 and "fetch.wait.max.ms" not in producer
    assert admin["socket.timeout.ms"] == 9000
    for config in (consumer, producer, admin):
        assert config["client.id"] == "app"  # unscoped: every client
        assert not any(k.startswith(("consumer.", "producer.", "admin.")) for k in config)
    assert "socket.timeout.ms" not in consumer and "socket.timeout.ms" not in producer


def test_the_scoped_setting_wins_over_the_same_one_unscoped_and_over_goka_s_default() -> None:
    user = {"consumer.auto.offset.reset": "latest", "auto.offset.reset": "error"}
    assert scoped(user, "consumer.") == {"auto.offset.reset": "latest"}
    assert scoped({"linger.ms": 1, "producer.linger.ms": 20}, "producer.") == {"linger.ms": 20}
    assert consumer_config("b:9092", user)["auto.offset.reset"] == "latest"
    assert producer_config("b:9092", {"producer.linger.ms": 50})["linger.ms"] == 50  # (goka's 5)
    assert producer_config("b:9092")["linger.ms"] == 5


def test_a_processor_s_message_limit_is_its_producer_s() -> None:
    from goka import Int64Codec, StringCodec, define_group, input, persist
    from goka.processing.config import TaskConfig

    graph = define_group("g", input("t", StringCodec(), lambda ctx, msg: None),
                         persist(Int64Codec()))  # fmt: skip
    limit = TaskConfig(
        graph,
        "b:9092",
        kafka_config={
            "producer.message.max.bytes": 200_000,
            "consumer.message.max.bytes": 9_000_000,
        },
    )
    assert limit.max_message_bytes == 200_000 - 8192  # (the consumer's limit is not the producer's)
