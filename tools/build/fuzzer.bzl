"""glm_fuzzer: one libFuzzer target and the test that replays its seeds."""

def glm_fuzzer(name, srcs, deps = []):
    """A fuzz target (LLVMFuzzerTestOneInput) over the seeds in corpus/<name>/.

    In a plain build it is a test that feeds every seed to the target once, so
    `bazel test //...` keeps the seeds (and the crashes once found, added to
    them) passing. Under --config=fuzz it links libFuzzer's main instead:
    tools/fuzz.sh runs it on a copy of the corpus for a bounded time.

    Args:
      name: the target; its seeds live in corpus/<name>/.
      srcs: the fuzz target's sources.
      deps: what it calls.
    """
    native.cc_test(
        name = name,
        srcs = srcs,
        args = ["%s/corpus/%s" % (native.package_name(), name)],
        data = native.glob(["corpus/%s/**" % name]),
        linkopts = select({
            "//tools/build:fuzzing": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        tags = ["fuzzer"],
        deps = deps + select({
            "//tools/build:fuzzing": [],
            "//conditions:default": ["//fuzz:seed_main"],
        }),
    )
