"""Moved to :mod:`goka.group.edges` (this path warns, and goes away in goka-py 0.2)."""

from goka._moved import moved

__getattr__ = moved(
    __name__,
    {
        "Callback": "goka.group.edges",
        "Domain": "goka.group.edges",
        "Edge": "goka.group.edges",
        "EventTime": "goka.group.edges",
        "Group": "goka.group.edges",
        "InputEdge": "goka.group.edges",
        "PersistEdge": "goka.group.edges",
        "Stream": "goka.group.edges",
        "Table": "goka.group.edges",
        "TimersEdge": "goka.group.edges",
        "WindowEdge": "goka.group.edges",
        "input": "goka.group.edges",
        "inputs": "goka.group.edges",
        "join": "goka.group.edges",
        "lookup": "goka.group.edges",
        "loop": "goka.group.edges",
        "output": "goka.group.edges",
        "persist": "goka.group.edges",
        "timers": "goka.group.edges",
        "window": "goka.group.edges",
    },
)
