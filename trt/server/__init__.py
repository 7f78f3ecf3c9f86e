"""trt's serving runtime: a protocol-neutral core with thin HTTP, gRPC and metrics transports."""
