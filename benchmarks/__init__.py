"""Benchmarks, each runnable as `python -m benchmarks.<name> [--quick]` and exposing `run(quick) -> dict`."""
