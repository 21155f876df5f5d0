//! Telling "the database is unavailable" (down, refusing connections, out of space) from
//! other database errors, so the APIs answer 503 with the reason instead of a bare 500.

/// SQLite primary result codes that mean the file cannot be used right now: BUSY,
/// READONLY, IOERR, FULL, CANTOPEN.
const SQLITE_UNAVAILABLE: [i64; 5] = [5, 8, 10, 13, 14];

/// PostgreSQL SQLSTATEs (or classes, by their first two characters) that mean the server
/// cannot serve us now: connection exceptions (08), insufficient resources (53, disk full
/// among them), operator intervention (57: shutdown, cannot connect now), a database not
/// accepting connections (55000), gone (3D000) or refusing our credentials (28).
fn postgres_unavailable(code: &str) -> bool {
    matches!(code.get(..2), Some("08" | "53" | "57" | "28")) || matches!(code, "55000" | "3D000")
}

fn sqlx_unavailable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_) => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| match code.parse::<i64>() {
            // SQLite reports (extended) result codes in decimal; PostgreSQL SQLSTATEs are
            // five characters, some all digits (53100), so both readings are tried.
            Ok(n) => SQLITE_UNAVAILABLE.contains(&(n & 0xff)) || postgres_unavailable(&code),
            Err(_) => postgres_unavailable(&code),
        }),
        _ => false,
    }
}

/// True when `err` (anywhere in its chain) is a database error meaning the database is
/// unavailable rather than the request being wrong: worth a 503 and a retry later.
pub fn is_unavailable(err: &anyhow::Error) -> bool {
    err.chain()
        .filter_map(|cause| cause.downcast_ref::<sqlx::Error>())
        .any(sqlx_unavailable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_and_io_failures_are_unavailability() {
        assert!(is_unavailable(
            &anyhow::Error::new(sqlx::Error::PoolTimedOut).context("storing a period")
        ));
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert!(is_unavailable(&sqlx::Error::Io(io).into()));
        assert!(!is_unavailable(&sqlx::Error::RowNotFound.into()));
        assert!(!is_unavailable(&anyhow::anyhow!("bad request")));
    }

    #[test]
    fn sqlstates_and_sqlite_codes() {
        for code in [
            "08006", "57P01", "57P03", "53100", "55000", "3D000", "28P01",
        ] {
            assert!(postgres_unavailable(code), "{code}");
        }
        for code in ["23505", "42P01", "22001"] {
            assert!(!postgres_unavailable(code), "{code}");
        }
        // SQLITE_FULL, and SQLITE_IOERR_WRITE (778 = 10 | 3 << 8) as an extended code.
        for code in [13, 778, 5, 14] {
            assert!(SQLITE_UNAVAILABLE.contains(&(code & 0xff)), "{code}");
        }
        assert!(
            !SQLITE_UNAVAILABLE.contains(&(2067 & 0xff)),
            "SQLITE_CONSTRAINT_UNIQUE"
        );
    }
}
