"""The `capreg` command: local commands (serve, migrate, keys, operator audit) and HTTP commands."""
