"""The gRPC door: the same route table as the HTTP side, served over gRPC beside it (``--grpc-port``).

``service.py`` is the ``vertex_llama.v1.Llama`` service (its methods call the routes' handlers, so the
same engine answers: no second model), ``descriptors.py`` declares it (for reflection and for clients
without a .proto), ``server.py`` runs it with grpc.health.v1 and reflection. Vertex AI's ``grpcPorts``
send ``:directPredict`` and ``:directRawPredict`` (and their streaming forms) to it.

Rule: this is the only package that imports grpc.
"""
