"""The ``vertex_llama.v1.Llama`` service's declaration, built as a descriptor (no generated code): every
method takes and answers ``google.protobuf.Struct``, the JSON body of the HTTP route it mirrors.

    service Llama {
      rpc Predict(google.protobuf.Struct) returns (google.protobuf.Struct);               // POST AIP_PREDICT_ROUTE
      rpc StreamPredict(google.protobuf.Struct) returns (stream google.protobuf.Struct);  // one instance, stream: true
      rpc ChatCompletions(google.protobuf.Struct) returns (google.protobuf.Struct);       // POST /v1/chat/completions
      rpc StreamChatCompletions(google.protobuf.Struct) returns (stream google.protobuf.Struct);
    }
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf import descriptor_pb2, descriptor_pool, struct_pb2

FILE_NAME = "vertex_llama/v1/llama.proto"
PACKAGE = "vertex_llama.v1"
SERVICE_NAME = f"{PACKAGE}.Llama"
STRUCT = ".google.protobuf.Struct"


@dataclass(frozen=True)
class Method:
    name: str
    path: str  # the HTTP route it calls
    streams: bool

    @property
    def full_name(self) -> str:
        """As Vertex AI's ``directPredict`` names it: ``/vertex_llama.v1.Llama/Predict``."""
        return f"/{SERVICE_NAME}/{self.name}"


PREDICT = "predict"  # the predict route, wherever AIP_PREDICT_ROUTE puts it
CHAT_PATH = "/v1/chat/completions"
METHODS = (
    Method("Predict", PREDICT, streams=False),
    Method("StreamPredict", PREDICT, streams=True),
    Method("ChatCompletions", CHAT_PATH, streams=False),
    Method("StreamChatCompletions", CHAT_PATH, streams=True),
)


def file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(name=FILE_NAME, package=PACKAGE, syntax="proto3",
                                               dependency=[struct_pb2.DESCRIPTOR.name])
    service = proto.service.add(name=SERVICE_NAME.rsplit(".", 1)[1])
    for method in METHODS:
        service.method.add(name=method.name, input_type=STRUCT, output_type=STRUCT,
                           server_streaming=method.streams)
    return proto


def register() -> None:
    """Add the service to the default descriptor pool (beside grpc.health.v1's), where reflection finds it."""
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(FILE_NAME)
    except KeyError:
        pool.Add(file_descriptor())
