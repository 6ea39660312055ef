"""Platform adapters (Slack, Discord, console): translate platform events to the core and back."""
