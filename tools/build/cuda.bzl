"""nvcc rules: CUDA sources compile to objects that a cc_library links."""

NVCC_FLAGS = [
    "-std=c++17",
    "-O3",
    "-gencode=arch=compute_90a,code=sm_90a",
    "-Xcompiler=-fPIC",
    "--expt-relaxed-constexpr",
    "-I.",
    "-I$(GENDIR)",
]

def cuda_library(name, srcs, hdrs = [], deps = [], cuda_hdrs = []):
    """Compiles .cu files with nvcc (sm_90a) into a cc_library.

    Args:
      name: the cc_library's name.
      srcs: .cu files.
      hdrs: headers other targets include.
      deps: cc_library dependencies of the C++ side.
      cuda_hdrs: extra headers the .cu files include (from other packages).
    """
    objs = []
    for src in srcs:
        obj = src[:-len(".cu")] + ".cu.o"
        native.genrule(
            name = src.replace("/", "_") + "_nvcc",
            srcs = [src] + hdrs + cuda_hdrs,
            outs = [obj],
            cmd = "/usr/local/cuda/bin/nvcc %s -c $(location %s) -o $@" % (" ".join(NVCC_FLAGS), src),
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["//third_party:cuda_runtime"],
        visibility = ["//visibility:public"],
    )
