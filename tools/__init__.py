"""The tool engine (declaration, schema, validation, execution) and installable tool packs."""
