"""The gRPC server's HTTP/2 (RFC 9113): connections, streams, flow control, keepalive, limits."""
