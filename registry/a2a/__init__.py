"""A2A's JSON-RPC binding at the registry URL: `GetExtendedAgentCard`, the extended card detail release serves."""
