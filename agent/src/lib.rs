//! Per-host agent: discovers RNICs, registers, probes with the six-timestamp protocol, uploads results.
