"""Tenure's Python client: leases on named resources, fenced by Raft log indexes.

    from tenure_client import Client, TenureError

    client = Client(["127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"])
    answer = client.acquire("world/eu-1", holder="server-7", ttl_s=30)

The messages are the generated `tenure.v1` ones, re-exported as `pb` (leases.proto) and
`cluster_pb` (cluster.proto); generate them with `python generate.py` first.
"""

try:
    from ._pb.tenure.v1 import cluster_pb2 as cluster_pb
    from ._pb.tenure.v1 import leases_pb2 as pb
except ImportError as error:  # pragma: no cover - a checkout without generated stubs
    raise ImportError(
        "tenure_client's gRPC stubs are missing: run `python generate.py` in client/python "
        "(needs grpcio-tools), then reinstall or use an editable install"
    ) from error

from ._client import Client, KeepAlive, TenureError
from .contract import LEADER_HEADER, REASON_HEADER, Reason

__all__ = ["Client", "KeepAlive", "TenureError", "Reason", "REASON_HEADER", "LEADER_HEADER", "pb", "cluster_pb"]
