//! Database access shared by controller and analyzer: one sqlx pool over SQLite or PostgreSQL, with migrations.
