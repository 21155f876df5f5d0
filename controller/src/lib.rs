//! Controller: RNIC registry, topology and pinglist generation behind a REST API.
