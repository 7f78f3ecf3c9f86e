"""Models: the repository, loading, lifecycle and versions, configs, warm-up and canary routing."""
