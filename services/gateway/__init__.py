"""The HTTP gateway and web UI: user JWTs, ``/api/*`` -> gRPC, problem+json, pages.

Start at ``app.create_app``; ``modules`` documents how route modules plug in.
"""
