"""The ledger: one versioned DuckDB schema, how processes share the file, rollups, reference data, settings."""
