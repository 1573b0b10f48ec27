"""The one part of the build pyproject.toml cannot say: the optional compiled extension.

flupfast/_speedups.pyx (with the flupfast/_cython/*.pxi it includes) holds compiled twins of the
pure-Python hot path. Where no C compiler works, the build installs pure Python and prints one
notice line instead of failing. Cython errors are never swallowed: a broken .pyx fails the build.

With FLUPFAST_SPEEDUPS asking for the compiled backend (``1``; the values of COMPILED_VALUES in
flupfast/_impl.py) a failed compile fails the build instead: cibuildwheel sets it.

The extension lives here rather than in ``[tool.setuptools] ext-modules``: setuptools calls that
table experimental and warns about it on every build (an error under ``-W error``), and the
fallback needs a build_ext subclass, which pyproject.toml cannot name.
"""
import ast
import os
import re
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, ExecError, PlatformError

# What a missing or broken C toolchain raises (compile and link errors are CCompilerErrors).
NO_COMPILER_ERRORS = (CCompilerError, ExecError, PlatformError)

NOTICE = ("flupfast: the optional C extension did not build (%s); installing the pure-Python "
          "backend. For the compiled one, reinstall with a working C compiler (CC).\n")


def compiled_required():
    """FLUPFAST_SPEEDUPS names one of flupfast/_impl.py's COMPILED_VALUES (read, not imported)."""
    with open(os.path.join("flupfast", "_impl.py")) as source:
        tree = ast.parse(source.read())
    values = next(ast.literal_eval(node.value) for node in tree.body
                  if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "COMPILED_VALUES")
    return os.environ.get("FLUPFAST_SPEEDUPS", "").strip().lower() in values


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
        if compiled_required():
            raise exc
        compiler = (getattr(self.compiler, "compiler_so", None) or ["the C compiler"])[0]
        status = re.search(r"exit (?:status|code) (\d+)", str(exc))
        if status:
            reason = "%s exited with status %s" % (compiler, status.group(1))
        else:
            reason = (str(exc).splitlines() or [type(exc).__name__])[0][:100]
        sys.stderr.write(NOTICE % reason)
        sys.stderr.flush()


setup(
    ext_modules=[Extension("flupfast._speedups", ["flupfast/_speedups.pyx"],
                           depends=["flupfast/_cython/%s" % name
                                    for name in sorted(os.listdir("flupfast/_cython"))
                                    if name.endswith(".pxi")],
                           optional=not compiled_required())],
    cmdclass={"build_ext": OptionalBuildExt},
)
