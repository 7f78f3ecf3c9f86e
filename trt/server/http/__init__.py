"""KServe v2 HTTP/REST with Triton's extensions, as a raw ASGI app (no framework on the hot path)."""
