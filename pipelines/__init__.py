"""Programs users run: `python -m pipelines.<name>`."""
