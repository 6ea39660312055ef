"""Platform-neutral core of the chat bot: config, turn loop, model client, memory, stores."""

__version__ = "0.1.0"
