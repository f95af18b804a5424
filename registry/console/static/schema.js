// Starts Swagger UI for /schema from this registry's own copy of its assets (no CDN, no inline script).
window.ui = SwaggerUIBundle({
  url: "/schema/openapi.json",
  dom_id: "#swagger-container",
  deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
});
