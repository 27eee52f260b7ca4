"""Table handling: column checks and coercion of config tables, batch forecasts over CSV/parquet files."""
