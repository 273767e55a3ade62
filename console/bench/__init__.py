"""Benchmarks: the engine in-process, a server under load, and the project's performance report."""
