"""The one part of the build pyproject.toml cannot say: the optional compiled extension.

flupfast/_speedups.pyx (with the flupfast/_cython/*.pxi it includes) holds compiled twins of the
pure-Python hot path. Where no C compiler works, the build installs pure Python and prints one
notice line instead of failing. Cython errors are never swallowed: a broken .pyx fails the build.

The extension lives here rather than in ``[tool.setuptools] ext-modules``: setuptools calls that
table experimental and warns about it on every build (an error under ``-W error``), and the
fallback needs a build_ext subclass, which pyproject.toml cannot name.
"""
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, ExecError, PlatformError

# What a missing or broken C toolchain raises (compile and link errors are CCompilerErrors).
NO_COMPILER_ERRORS = (CCompilerError, ExecError, PlatformError)

NOTICE = ("flupfast: no working C compiler (%s); installing the pure-Python backend "
          "(set CC or install gcc and reinstall for the compiled one).\n")


class OptionalBuildExt(build_ext):
    """build_ext that falls back to pure Python when the C compiler is missing or fails."""

    def run(self):
        try:
            super().run()
        except NO_COMPILER_ERRORS as exc:
            self.pure_python(exc)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except NO_COMPILER_ERRORS as exc:
            self.pure_python(exc)

    def pure_python(self, exc):
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if len(reason) > 100:
            reason = reason[:97] + "..."
        sys.stderr.write(NOTICE % reason)
        sys.stderr.flush()


setup(
    ext_modules=[Extension("flupfast._speedups", ["flupfast/_speedups.pyx"],
                           depends=["flupfast/_cython/%s" % name
                                    for name in sorted(os.listdir("flupfast/_cython"))
                                    if name.endswith(".pxi")],
                           optional=True)],
    cmdclass={"build_ext": OptionalBuildExt},
)
