"""Per-person connections to `auth=user` MCP servers: the sign-in (`signin`), the sealed token
storage and the SDK's OAuth client bound to one person (`tokens`)."""
