"""The subcommands of the ``goka`` command line (see :mod:`goka.cli`), one module each."""
