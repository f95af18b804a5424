"""What active PostgreSQL backends wait for while a load runs (issue 39's evidence):
`python -m bench.wait_events --database-url URL --seconds S [--interval 0.05]` samples
pg_stat_activity every interval and prints, as JSON, the share of active client backends' samples per
wait event (`Lock/tuple`, `LWLock/WALWrite`, `IO/WALSync`, `CPU` when none), and the lock waits by
the statement that waited (its first 80 characters). Run it beside `python -m bench` on the same
server (the bench's --database-url)."""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import time

import asyncpg


async def sample(url: str, seconds: float, interval: float, databases: str) -> dict:
    conn = await asyncpg.connect(url)
    waits: collections.Counter[str] = collections.Counter()
    statements: collections.Counter[str] = collections.Counter()
    samples = 0
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            rows = await conn.fetch(
                """SELECT wait_event_type, wait_event, left(query, 80) AS query FROM pg_stat_activity
                    WHERE state = 'active' AND backend_type = 'client backend' AND pid <> pg_backend_pid()
                      AND datname LIKE $1""",
                databases,
            )
            for row in rows:
                what = f"{row['wait_event_type']}/{row['wait_event']}" if row["wait_event_type"] else "CPU"
                waits[what] += 1
                if row["wait_event_type"] == "Lock":
                    statements[" ".join(row["query"].split())] += 1
            samples += 1
            await asyncio.sleep(interval)
    finally:
        await conn.close()
    total = sum(waits.values()) or 1
    return {
        "samples": samples,
        "active_backend_samples": sum(waits.values()),
        "share": {k: round(v / total, 3) for k, v in waits.most_common()},
        "lock_waits_by_statement": dict(statements.most_common(5)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--databases", default="capreg_bench_%", help="LIKE pattern of the databases sampled")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(sample(args.database_url, args.seconds, args.interval, args.databases)), indent=2))


if __name__ == "__main__":
    main()
