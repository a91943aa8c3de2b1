"""The gRPC runtime every service shares.

``credentials`` (service JWTs), ``scope`` (the caller's scope from metadata),
``errors`` (the one domain error <-> status table), ``server`` (build, serve,
graceful stop), ``client`` (channels and call metadata) and ``subjects`` (the
Workspace read of a subject, by its kind).
"""

from typing import Any, TypeAlias

import grpc

# What a servicer method and the shared helpers receive: they serve every
# method, so the request and response types are the method's, not the helper's.
ServicerContext: TypeAlias = grpc.aio.ServicerContext[Any, Any]
