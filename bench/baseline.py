"""The baseline: a trivial litestar endpoint returning a 1 KB JSON object, served by granian (ASGI)
with the same worker count as `capreg serve`. Every capreg figure is reported as a ratio to it.

Run: python -m bench.baseline --port 8099
"""

from __future__ import annotations

import argparse

from litestar import Litestar, get

# About 1 KB once encoded: a realistic small JSON document, built once.
PAYLOAD = {
    "service": "baseline",
    "items": [
        {"id": f"item-{i:03d}", "name": f"Item number {i}", "score": i * 1.5, "active": i % 2 == 0} for i in range(14)
    ],
}


@get("/baseline", sync_to_thread=False)
def baseline() -> dict:
    return PAYLOAD


app = Litestar(route_handlers=[baseline], debug=False)


def main() -> None:
    from granian import Granian
    from granian.constants import Interfaces

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    Granian(
        "bench.baseline:app",
        address=args.host,
        port=args.port,
        interface=Interfaces.ASGI,
        workers=args.workers,
        log_access=False,
    ).serve()


if __name__ == "__main__":
    main()
