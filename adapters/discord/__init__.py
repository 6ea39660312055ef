"""The Discord adapter (discord.py 2.x on the shared core). Entry point: `adapters.discord.main`."""
