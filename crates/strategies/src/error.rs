//! Errors of backend setup (connect, schema, seed, check); per-operation errors are
//! `counterlab_core::OpError` instead, because they are results, not failures.

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("cannot connect to {backend} at {url}: {detail}")]
    Connect { backend: &'static str, url: String, detail: String },
    #[error("{backend}: {step} failed in namespace {namespace}: {detail}")]
    Step { backend: &'static str, step: &'static str, namespace: String, detail: String },
    /// The run would not start: what was refused and why.
    #[error("{0}")]
    Refused(String),
}

/// Replaces the password in a connection URL (userinfo or `password=` parameter) with
/// `***` so it never reaches output or reports.
pub fn redact_url(url: &str) -> String {
    let url = redact_password_param(url);
    let url = url.as_str();
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest_start = scheme_end + 3;
    let rest = &url[rest_start..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_string();
    };
    let userinfo = &rest[..at];
    match userinfo.find(':') {
        Some(colon) => format!("{}{}:***{}", &url[..rest_start], &userinfo[..colon], &rest[at..]),
        None => url.to_string(),
    }
}

fn redact_password_param(url: &str) -> String {
    let Some(q) = url.find('?') else {
        return url.to_string();
    };
    let params: Vec<String> = url[q + 1..]
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
            _ => kv.to_string(),
        })
        .collect();
    format!("{}?{}", &url[..q], params.join("&"))
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(redact_url("postgres://bob:s3cr:et@db:5432/x"), "postgres://bob:***@db:5432/x");
        assert_eq!(redact_url("postgres://bob@db/x"), "postgres://bob@db/x");
        assert_eq!(redact_url("postgres://db/x?sslmode=a&password=no"), "postgres://db/x?sslmode=a&password=***");
        assert_eq!(redact_url("not a url"), "not a url");
    }
}
