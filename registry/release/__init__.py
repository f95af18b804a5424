"""Detail release: the version a caller sees, the release checks, tools, argument validation."""
