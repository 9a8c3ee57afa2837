"""Build the Cython core.

FASTCOORD_NO_EXTENSIONS=1  build nothing native: the package runs on its pure twin.
FASTCOORD_DEBUG=1          build with line tracing and write Cython's annotated HTML
                           (tracing slows the code many times: never for benchmarks).
"""
import glob
import os
import sys

from setuptools import setup

NO_EXTENSIONS = os.environ.get("FASTCOORD_NO_EXTENSIONS", "") not in ("", "0")
DEBUG = os.environ.get("FASTCOORD_DEBUG", "") not in ("", "0")


def native_extensions():
    from Cython.Build import cythonize
    from setuptools import Extension
    import numpy

    macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]
    directives = {
        "language_level": 3,
        "boundscheck": False,
        "wraparound": False,
        "cdivision": True,
        "initializedcheck": False,
        "freethreading_compatible": True,
        "embedsignature": True,
    }
    compile_args = ["-O3"]
    if DEBUG:
        directives.update(linetrace=True, binding=True, boundscheck=True, wraparound=True)
        macros += [("CYTHON_TRACE_NOGIL", "1")]
        compile_args = ["-O0", "-g"]
    # Built on epoll, Linux only: the load generator's engine (elsewhere
    # fastcoord.server.loadgen runs its asyncio engine) and the server's heartbeat lane
    # (elsewhere the server serves every connection through the event loop).
    linux_only = {"fastcoord._native.loadgen", "fastcoord._native.lane"}
    extensions = []
    for pyx in sorted(glob.glob("fastcoord/_native/*.pyx")):
        name = pyx[:-4].replace("/", ".")
        if name in linux_only and not sys.platform.startswith("linux"):
            continue
        extensions.append(
            Extension(
                name,
                [pyx],
                include_dirs=[numpy.get_include()],
                define_macros=macros,
                extra_compile_args=compile_args,
            )
        )
    # The group state machine: the pure twin's module (fastcoord/_pure/groups.py),
    # compiled as it is for the native twin, with Python's semantics throughout: no C
    # typing from annotations (which would reject the int and str subclasses the pure
    # twin accepts), Python's division and indexing. Its classes Member, Group and
    # GroupLogic become extension types by fastcoord/_native/groups.pxd (an augmenting
    # .pxd: attributes in object slots, hot methods cpdef with their group and member
    # locals typed), which changes how an attribute is reached or a method called, not
    # a value; nonecheck keeps a None where a Group is typed an AttributeError, as in
    # the pure twin. Its own cythonize call: the directives below are for the .pyx
    # modules' typed code.
    # (warn.unreachable off: a branch on cython.compiled leaves the other unreachable)
    python_semantics = {"language_level": 3, "annotation_typing": False, "binding": True,
                        "embedsignature": True, "nonecheck": True, "warn.unreachable": False}
    if DEBUG:
        python_semantics.update(linetrace=True)
    # The Python layers a replay runs on every join, sync and leave: the coordinator's
    # thin API (argument checks, then the group logic) and the pipeline's replay driver
    # (its per-request bookkeeping). Compiled in place with the same Python semantics,
    # each as its own module name, which Python imports before the .py beside it;
    # a build without extensions, or a machine without a compiler, runs the .py.
    # (replay.pxd beside replay.py augments it as groups.pxd does groups.py, and
    # clock.pxd and store.pxd clock.py and store.py: ManualClock and InMemoryStore
    # extension types the C code cimports.)
    # (The Makefile rebuilds when either source changes: a stale .so would shadow it;
    # fastcoord._compat.COMPILED_IN_PLACE names them for the pure setting, which loads
    # the .py: tests/test_compiled_python.py,
    # test_compiled_in_place_lists_what_the_build_compiled, checks the lists agree.)
    compiled_python = ["fastcoord/clock.py", "fastcoord/coordinator.py",
                       "fastcoord/pipeline/replay.py", "fastcoord/store.py"]
    # cythonize does not see that groups.py depends on its augmenting .pxd, which sits
    # in another directory (nor on the .pxd files that one cimports): after an edit of
    # one, it would reuse groups.c, laid out for the old declarations, beside modules
    # (tracerun) built for the new ones. Regenerate it when any is newer.
    groups_c = "fastcoord/_pure/groups.c"
    if os.path.exists(groups_c) and any(
            os.path.getmtime(pxd) > os.path.getmtime(groups_c)
            for pxd in glob.glob("fastcoord/_native/*.pxd")):
        os.remove(groups_c)
    python_modules = cythonize(
        [Extension("fastcoord._native.groups", ["fastcoord/_pure/groups.py"],
                   extra_compile_args=compile_args, define_macros=macros)]
        + [Extension(py[:-3].replace("/", "."), [py], extra_compile_args=compile_args,
                     define_macros=macros) for py in compiled_python],
        compiler_directives=python_semantics,
        annotate=DEBUG,
    )
    return python_modules + cythonize(
        extensions,
        compiler_directives=directives,
        annotate=DEBUG,
        nthreads=int(os.environ.get("FASTCOORD_BUILD_JOBS", "0")) or None,
    )


setup(ext_modules=[] if NO_EXTENSIONS else native_extensions())
