//! Turning the operator's database argument into a sqlx URL, and hiding its password.

use crate::Backend;

/// A database argument resolved to an engine and the URL sqlx understands.
pub(crate) struct Target {
    pub(crate) backend: Backend,
    pub(crate) sqlx_url: String,
}

/// Resolves `sqlite://path`, `sqlite:path`, a bare path, or a PostgreSQL URL.
pub(crate) fn parse(url: &str) -> anyhow::Result<Target> {
    let url = url.trim();
    if url.is_empty() {
        anyhow::bail!("empty database URL");
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Target {
            backend: Backend::Postgres,
            sqlx_url: url.to_string(),
        });
    }
    let sqlite_url = if url.starts_with("sqlite:") {
        url.to_string()
    } else if url.contains("://") {
        anyhow::bail!(
            "unsupported database URL {} (use sqlite://PATH or postgres://...)",
            redact_url(url)
        );
    } else {
        // A bare path: escape what sqlx would read as URL syntax.
        let escaped = url
            .replace('%', "%25")
            .replace('?', "%3F")
            .replace('#', "%23");
        format!("sqlite://{escaped}")
    };
    Ok(Target {
        backend: Backend::Sqlite,
        sqlx_url: with_create_mode(sqlite_url),
    })
}

/// Makes SQLite create the file when missing, unless the URL already chose a mode.
fn with_create_mode(url: String) -> String {
    match url.split_once('?') {
        Some((_, query)) if query.split('&').any(|p| p.starts_with("mode=")) => url,
        Some(_) => format!("{url}&mode=rwc"),
        None => format!("{url}?mode=rwc"),
    }
}

/// The URL with any password replaced by `***`, safe for logs and error messages.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return url.to_string();
    };
    let user = match userinfo.split_once(':') {
        Some((user, _password)) => format!("{user}:***"),
        None => userinfo.to_string(),
    };
    format!("{scheme}://{user}@{host}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_paths_and_sqlite_urls_become_creating_sqlite_urls() {
        let t = parse("rocemesh.db").unwrap();
        assert_eq!(t.backend, Backend::Sqlite);
        assert_eq!(t.sqlx_url, "sqlite://rocemesh.db?mode=rwc");
        assert_eq!(
            parse("/var/lib/a?b#c%.db").unwrap().sqlx_url,
            "sqlite:///var/lib/a%3Fb%23c%25.db?mode=rwc"
        );
        assert_eq!(
            parse("sqlite://x.db?cache=shared").unwrap().sqlx_url,
            "sqlite://x.db?cache=shared&mode=rwc"
        );
        assert_eq!(
            parse("sqlite://x.db?mode=ro").unwrap().sqlx_url,
            "sqlite://x.db?mode=ro"
        );
    }

    #[test]
    fn postgres_urls_pass_through_and_others_are_refused() {
        let t = parse("postgresql://u:p@h/db").unwrap();
        assert_eq!(t.backend, Backend::Postgres);
        assert_eq!(t.sqlx_url, "postgresql://u:p@h/db");
        let err = parse("mysql://root:hunter2@h/db")
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("unsupported") && !err.contains("hunter2"),
            "{err}"
        );
        assert!(parse("  ").is_err());
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db?x=1"),
            "postgres://u:***@h:5432/db?x=1"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("postgres://h/db"), "postgres://h/db");
        assert_eq!(redact_url("rocemesh.db"), "rocemesh.db");
    }
}
