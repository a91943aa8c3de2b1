"""The gRPC runtime every service shares.

``credentials`` (service JWTs), ``scope`` (the caller's scope from metadata),
``errors`` (the one domain error <-> status table), ``server`` (build, serve,
graceful stop) and ``client`` (channels and call metadata).
"""
