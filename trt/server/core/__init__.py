"""The serving core: repository, model lifecycle, backends and statistics.

Nothing in here knows about HTTP or gRPC. Transports translate bytes into the types of
``server.core.types`` and map ``server.core.errors`` to their own status codes.
"""
