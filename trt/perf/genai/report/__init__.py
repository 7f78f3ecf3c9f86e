"""What a generative run leaves: the console table, genai-perf-shaped CSV and JSON, and plots."""
