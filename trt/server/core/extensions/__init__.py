"""Triton's protocol extensions as the core serves them: tracing, statistics, custom metrics,
logging settings, system shared memory and classification."""
