"""The emitter's optional C fast path; everything else is configured in pyproject.toml.

``optional=True``: where no C compiler is available the build goes on without the extension and
goka.emitter runs its pure-Python code (GOKA_NO_SPEEDUPS=1 forces that where it is built).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "goka._speedups",
            sources=["goka/_speedups.c"],
            optional=True,
            extra_compile_args=["-O2", "-Wall", "-Werror=implicit-function-declaration"],
        )
    ]
)
