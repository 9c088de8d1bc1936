"""Builds the optional C accelerator rocketq._speedups (see src/rocketq/speedups.py).

Everything else about the package is declared in pyproject.toml. Without a C compiler or the
Python headers the extension is left out with a one-line notice and rocketq runs on its
pure-Python codecs.
"""

from __future__ import annotations

import os
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NOTICE = "rocketq: the C accelerator rocketq._speedups is not built ({}); rocketq runs on pure Python"


class OptionalBuildExt(build_ext):
    """build_ext that turns a missing compiler or missing headers into a notice, not a failure."""

    def run(self) -> None:
        include = sysconfig.get_paths().get("include", "")
        if not os.path.exists(os.path.join(include, "Python.h")):
            print(NOTICE.format(f"no Python.h in {include}"), file=sys.stderr)
            return
        try:
            super().run()
        except Exception as exc:  # distutils' compiler errors, a missing cc (OSError), ...
            print(NOTICE.format(f"{type(exc).__name__}: {exc}"), file=sys.stderr)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            print(NOTICE.format(f"{type(exc).__name__}: {exc}"), file=sys.stderr)


setup(
    ext_modules=[
        Extension(
            "rocketq._speedups",
            sources=["src/rocketq/_speedups.c"],
            optional=True,
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
