"""Memory (docs/memory.md): recall before a run, capture after it, the memory tools, and the backends behind them."""
