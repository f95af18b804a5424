"""What every context shares: settings, app state, errors, records, wire types, cursors, caches."""
