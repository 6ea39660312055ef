"""Test helpers shared across test packages: real servers (mongoeco, Redis) and fixtures."""
