from examples.enrichment import service
from examples.enrichment.group import ENRICHED, ORDERS, graph
from goka.tester import Tester


def test_orders_are_enriched_with_the_users_country_and_counted() -> None:
    with service.running(delay=0.001) as url:
        tester = Tester(graph(url))
        for n, user in enumerate(["ann", "bob", "ann", "cem", "ann"]):
            tester.consume(ORDERS, user, {"order": n, "amount": 10})
    assert tester.table(graph(url).table) == {
        user: {"orders": n, "country": service.country_of(user)}
        for user, n in [("ann", 3), ("bob", 1), ("cem", 1)]
    }
    enriched = [(r.key, tester.codec(ENRICHED).decode(r.value)) for r in tester.messages(ENRICHED)]
    assert [(user, order["order"], order["nth"]) for user, order in enriched if user == "ann"] == [
        ("ann", 0, 1),
        ("ann", 2, 2),
        ("ann", 4, 3),
    ]
    assert all(order["country"] == service.country_of(user) for user, order in enriched)
