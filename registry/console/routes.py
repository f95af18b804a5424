"""HTTP: the security console (`/console`, static files shipped in registry/console/), Swagger UI for
`/schema` served from the installed `openapi-ui-bundles` package (Swagger UI 5,
which reads OpenAPI 3.1; no CDN), and the browser-facing
security headers every response carries.

The console is plain HTML, ES modules and CSS on the JSON API; it holds no server-side state and no
cookies. docs/console.md describes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from litestar import Request, Response, get
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.static_files import create_static_files_router
from openapi_ui_bundles.swagger_ui import static_path as swagger_ui_path

CONSOLE_DIR = Path(__file__).resolve().parent.parent / "console"
SWAGGER_ASSETS = "/console/vendor/swagger-ui"

# The console and /schema: no inline script or style, nothing from another origin, never framed.
PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
# JSON and everything else: nothing to load, nothing to run.
API_CSP = "default-src 'none'; frame-ancestors 'none'"

_COMMON_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


_PAGE_HEADERS = [*_COMMON_HEADERS, (b"content-security-policy", PAGE_CSP.encode())]
_API_HEADERS = [*_COMMON_HEADERS, (b"content-security-policy", API_CSP.encode())]


def browser_headers(path: str) -> list[tuple[bytes, bytes]]:
    """The security headers every response to `path` carries (added by the one request middleware,
    registry.web.observability, unless the response sets them itself)."""
    return _PAGE_HEADERS if path.startswith(("/console", "/schema")) else _API_HEADERS


@get(["/console", "/console/"], include_in_schema=False)
async def console_page() -> Response[bytes]:
    # Read per request (a small file): an upgraded package serves its own page without a restart.
    return Response(
        (CONSOLE_DIR / "index.html").read_bytes(),
        media_type="text/html",
        headers={"Cache-Control": "no-cache"},
    )


class OfflineSwaggerRenderPlugin(SwaggerRenderPlugin):
    """Swagger UI at /schema with its assets from this server and no inline script, so the page
    works offline and under the same-origin script policy."""

    def __init__(self) -> None:
        super().__init__(
            js_url=f"{SWAGGER_ASSETS}/swagger-ui-bundle.js",
            css_url=f"{SWAGGER_ASSETS}/swagger-ui.css",
            standalone_preset_js_url=f"{SWAGGER_ASSETS}/swagger-ui-standalone-preset.js",
            path="/swagger",
            favicon=f"<link rel='icon' type='image/png' href='{SWAGGER_ASSETS}/favicon-32x32.png'>",
            style="<link rel='stylesheet' href='/console/static/schema.css'>",
        )

    def render(self, request: Request, openapi_schema: dict[str, Any]) -> bytes:
        title = str(openapi_schema.get("info", {}).get("title", "API")).replace("&", "&amp;").replace("<", "&lt;")
        return f"""<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>{title}</title>
  {self.favicon}
  <link rel="stylesheet" href="{self.css_url}">
  {self.style}
  <script src="{self.js_url}"></script>
  <script src="{self.standalone_preset_js_url}"></script>
  <script src="/console/static/schema.js" defer></script>
</head>
<body><div id="swagger-container"></div></body>
</html>""".encode()


_FAVICON = (CONSOLE_DIR / "static" / "favicon.ico").read_bytes()


@get("/favicon.ico", include_in_schema=False)
async def favicon() -> Response[bytes]:
    """Browsers ask every origin for one (the console, /schema): answered, not a 404 in their consoles."""
    return Response(_FAVICON, media_type="image/x-icon", headers={"Cache-Control": "public, max-age=86400"})


ROUTES = [
    console_page,
    favicon,
    create_static_files_router("/console/static", [CONSOLE_DIR / "static"], name="console-static"),
    create_static_files_router(SWAGGER_ASSETS, [swagger_ui_path], name="swagger-ui-assets"),
]
