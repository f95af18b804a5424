"""MCP: the `/mcp` endpoint, its tools, and the stdio bridge."""
