"""The raw-log source: Criteo/CSV/TSV lines parsed in the graph (source, parsing, rebatch)."""
