"""Outputs of a run: perf_analyzer's CSV, JSON, a throughput-latency plot, CI gates, the console."""
