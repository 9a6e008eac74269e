"""Reproducible benchmarks: walgate beside the physical limit (and a peer broker where one applies)."""
