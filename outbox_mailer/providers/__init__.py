"""Provider API tables, pure: request building and answer reading per provider, the registry of kinds."""
