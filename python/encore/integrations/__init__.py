"""Adapters that put encore where people already run batch jobs and pipelines. Each is a thin client of
encore.SentenceEncoder (no engine logic here); import the one you need, e.g. ``encore.integrations.ray``."""
