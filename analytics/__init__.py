"""Pure analytics: a DuckDB connection (or polars frame) and keyword-only filters in, polars out.

Never imports streamlit. The CLI, the pages and the reports call these functions and nothing else, so a
number is the same wherever it is shown. docs/metrics.md defines every figure.
"""
