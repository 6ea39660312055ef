"""Helpers every platform adapter shares: exactly-once delivery, task tracking for a clean
shutdown, admission control by event-loop lag, structured log events, the health/metrics routes
and the start-up lifecycle (`adapters.common.startup`)."""
