"""Read click counts from a view server over gRPC.

python -m examples.click_count.client HOST:PORT user-01 user-02 ...
"""

from __future__ import annotations

import sys

from goka.grpc import ViewClient


def main(argv: list[str]) -> int:
    address, users = argv[0], argv[1:]
    with ViewClient(address) as client:
        counts = (
            client.get_many("clicks-table", users) if users else dict(client.scan("clicks-table"))
        )
    for user, count in sorted(counts.items()):
        print(f"{user}: {count}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
