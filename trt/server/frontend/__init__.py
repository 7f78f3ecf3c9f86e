"""``trt serve --frontend-workers N``: the HTTP and gRPC transports in N worker processes, everything
else (models, schedulers, statistics, metrics, the repository) in the one core process."""
