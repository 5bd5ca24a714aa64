"""Benchmarks: ``python -m bench`` (``make bench``). See docs/benchmarks.md."""
