"""nvcc rules: CUDA sources compile to objects that a cc_library links."""

# CUDA targets stay out of `bazel build //...` (the CPU build needs no CUDA); build
# them with `bazel build --config=cuda $(bazel query 'attr(tags, cuda, //...)')`.
CUDA_TAGS = ["manual", "cuda"]

NVCC_FLAGS = [
    "-std=c++17",
    "-O3",
    "-gencode=arch=compute_90a,code=sm_90a",
    "-Xcompiler=-fPIC",
    "--expt-relaxed-constexpr",
    "-I.",
    "-I$(GENDIR)",
    "-I/usr/local/cuda/include",
]

def cuda_library(name, srcs, hdrs = [], deps = [], cuda_hdrs = [], copts = []):
    """Compiles .cu files with nvcc (sm_90a) into a cc_library.

    Args:
      name: the cc_library's name.
      srcs: .cu files.
      hdrs: headers other targets include.
      deps: cc_library dependencies of the C++ side.
      cuda_hdrs: extra headers the .cu files include (from other packages).
      copts: nvcc flags for this target only, after NVCC_FLAGS (for example
        the include folder of an external header library in cuda_hdrs).
    """
    objs = []
    for src in srcs:
        obj = src[:-len(".cu")] + ".cu.o"
        native.genrule(
            name = src.replace("/", "_") + "_nvcc",
            srcs = [src] + hdrs + cuda_hdrs,
            outs = [obj],
            cmd = "/usr/local/cuda/bin/nvcc %s -c $(location %s) -o $@" % (" ".join(NVCC_FLAGS + copts), src),
            tags = CUDA_TAGS,
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["//third_party:cuda_runtime"],
        tags = CUDA_TAGS,
        visibility = ["//visibility:public"],
    )
