"""HTTP/2 (RFC 9113) pieces shared by both of trt's ends of a connection: frame constants and HPACK.

The gRPC server (``trt.server.grpc.h2``) and ``trt perf``'s hand-framed gRPC client
(``trt.perf.transport.grpc_h2``) build on them; neither side imports the other.
"""
