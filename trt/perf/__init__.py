"""trt perf: load generation against any server that speaks Triton's protocol."""
