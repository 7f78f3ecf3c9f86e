"""Triton's wire contract: ``*.proto`` sources and the modules generated from them.

Regenerate with ``python scripts/generate_protos.py``; a test fails when they are stale.
"""
