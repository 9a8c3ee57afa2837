"""Build the Cython core.

FASTCOORD_NO_EXTENSIONS=1  build nothing native: the package runs on its pure twin.
FASTCOORD_DEBUG=1          build with line tracing and write Cython's annotated HTML
                           beside the generated C, under build/cython/ (tracing slows
                           the code many times: never for benchmarks).
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
    # Built on epoll, Linux only: the load generator's engine (elsewhere fastcoord.loadgen
    # runs its asyncio engine) and the server's heartbeat lane (elsewhere the server
    # serves every connection through the event loop).
    linux_only = {"fastcoord.loadgen._native.engine", "fastcoord.server._native.lane"}
    extensions = []
    for pyx in sorted(glob.glob("fastcoord/**/_native/*.pyx", recursive=True)):
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
    # Python modules compiled in place, each beside its .py under the same name (Python
    # imports the extension before the .py; a build without extensions, or a machine
    # without a compiler, runs the .py). The group state machine is the native twin's
    # (the pure twin runs the same file from source: core/_pure/groups.py); the
    # coordinator's thin API and the pipeline's replay driver are the Python layers a
    # replay runs on every join, sync and leave; clock.py and store.py hold the
    # ManualClock and InMemoryStore extension types the C code cimports. The .pxd beside
    # each (an augmenting .pxd) makes its classes extension types with attributes in
    # object slots and hot methods cpdef, which changes how an attribute is reached or a
    # method called, not a value. They keep Python's semantics throughout: no C typing
    # from annotations (which would reject the int and str subclasses the pure twin
    # accepts), Python's division and indexing, and nonecheck so that a None where an
    # extension type is declared raises AttributeError as in Python. (The same list is
    # fastcoord._twins.COMPILED_IN_PLACE: tests/package/test_compiled_python.py checks they agree.)
    python_semantics = {"language_level": 3, "annotation_typing": False, "binding": True,
                        "embedsignature": True, "nonecheck": True}
    if DEBUG:
        python_semantics.update(linetrace=True)
    compiled_python = ["fastcoord/core/clock.py", "fastcoord/core/coordinator.py",
                       "fastcoord/core/groups.py", "fastcoord/core/store.py",
                       "fastcoord/pipeline/replay.py"]
    # The generated C goes to a directory of its own per interpreter and numpy: it holds
    # what numpy's .pxd of that version declares, so C generated in one venv (a
    # `make test-other-python`) must not be compiled in another.
    build_dir = os.path.join("build", "cython",
                             f"{sys.implementation.cache_tag}-numpy{numpy.__version__}")
    python_modules = cythonize(
        [Extension(py[:-3].replace("/", "."), [py], extra_compile_args=compile_args,
                   define_macros=macros) for py in compiled_python],
        compiler_directives=python_semantics,
        annotate=DEBUG,
        build_dir=build_dir,
    )
    return python_modules + cythonize(
        extensions,
        compiler_directives=directives,
        annotate=DEBUG,
        build_dir=build_dir,
        nthreads=int(os.environ.get("FASTCOORD_BUILD_JOBS", "0")) or None,
    )


setup(ext_modules=[] if NO_EXTENSIONS else native_extensions())
