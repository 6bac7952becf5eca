"""The optional C fast paths (the emitter's and the window update's); everything else is
configured in pyproject.toml.

``optional=True``: where no C compiler is available the build goes on without the extension and
goka.emitter and goka.time.window_update run their pure-Python code (GOKA_NO_SPEEDUPS=1 forces
that where it is built).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "goka._speedups",
            sources=["goka/_speedups.c", "goka/_window_update.c", "goka/_copy_json.c"],
            optional=True,
            extra_compile_args=["-O2", "-Wall", "-Werror=implicit-function-declaration"],
        )
    ]
)
