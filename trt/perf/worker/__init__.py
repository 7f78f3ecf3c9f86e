"""Load-generator processes: each runs its share of the load (a blocking thread per slot, or one asyncio
loop) and hands the parent what completed since the last window boundary."""
