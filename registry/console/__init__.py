"""The security console: its routes and the static files it serves."""
