"""Moved to :mod:`goka.group.graph` (this path warns, and goes away in goka-py 0.2)."""

from goka._moved import moved

__getattr__ = moved(
    __name__,
    {
        "Callback": "goka.group.graph",
        "Edge": "goka.group.graph",
        "Group": "goka.group.graph",
        "GroupGraph": "goka.group.graph",
        "NilHandling": "goka.group.graph",
        "Stream": "goka.group.graph",
        "Table": "goka.group.graph",
        "define_group": "goka.group.graph",
        "input": "goka.group.graph",
        "inputs": "goka.group.graph",
        "join": "goka.group.graph",
        "load_graph": "goka.group.graph",
        "lookup": "goka.group.graph",
        "loop": "goka.group.graph",
        "output": "goka.group.graph",
        "persist": "goka.group.graph",
        "timers": "goka.group.graph",
        "window": "goka.group.graph",
    },
)
