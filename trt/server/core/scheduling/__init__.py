"""Scheduling: how requests reach instances (direct, dynamic and sequence batching, request-level
scheduling, ensembles), and what they share (instance pool, rate limiter, response cache, timers)."""
