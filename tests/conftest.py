pytest_plugins = ["goka.dev.pytest_plugin"]
