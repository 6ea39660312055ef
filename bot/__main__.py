"""`python -m bot` is the same as the `bot` console script."""

from bot.cli import main

raise SystemExit(main())
