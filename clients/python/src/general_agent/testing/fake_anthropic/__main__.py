"""``python -m general_agent.testing.fake_anthropic``: see :func:`main` (cli.py)."""

from .cli import main

raise SystemExit(main())
