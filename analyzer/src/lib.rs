//! Analyzer: ingests result batches and aggregates per-period SLA figures.
