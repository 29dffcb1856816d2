"""C++ and gRPC code generation with Debian's protoc and grpc_cpp_plugin."""

def glm_proto_library(name, srcs, deps = [], grpc = False):
    """Generates <name> (a cc_library) from .proto files in this package.

    Args:
      name: the cc_library's name.
      srcs: .proto files.
      deps: other glm_proto_library targets whose .proto files these import.
      grpc: also generate gRPC service stubs.
    """
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.h", base + ".pb.cc"]
        if grpc:
            outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    grpc_flags = "--grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin" if grpc else ""
    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = outs,
        cmd = "protoc --proto_path=. --cpp_out=$(GENDIR) %s %s" % (
            grpc_flags,
            " ".join(["$(location %s)" % s for s in srcs]),
        ),
    )
    native.filegroup(
        name = name + "_srcs",
        srcs = srcs + [d + "_srcs" for d in deps],
        visibility = ["//visibility:public"],
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["//third_party:protobuf"] + (["//third_party:grpc"] if grpc else []),
        visibility = ["//visibility:public"],
    )
