"""`OPTIONS` answers every method served at a path.

litestar builds a path's automatic OPTIONS handler when the path's first handler is registered; a
second handler on the same path (GET and PUT of `/v1/agents/{tenant}/{agentId}`, GET and POST of
`/v1/tickets`) is merged into a new route that keeps the first route's OPTIONS handler, whose
`Allow` still lists the first route's methods only. `answer_every_method` points each such handler
at the route that now serves the path, once, after the app is built.
"""

from __future__ import annotations

from litestar import Litestar
from litestar.routes import HTTPRoute


def answer_every_method(app: Litestar) -> None:
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        for handler in route.route_handlers:
            function = getattr(handler.fn, "__wrapped__", handler.fn)
            if handler.http_methods != {"OPTIONS"} or function.__name__ != "options_handler":
                continue
            for cell in function.__closure__ or ():
                if isinstance(cell.cell_contents, HTTPRoute):
                    cell.cell_contents = route  # the route whose methods its Allow header lists
