//! Connection strings: their passwords redacted before any output, and a check that a
//! URL is one of the expected schemes with a host.

/// Replaces every password in a connection string with `***` so it never reaches output
/// or reports: URL userinfo (parsed with the `url` crate; in malformed URLs such as
/// `postgres//u:pw@h` or `mysql:/u:pw@h/db`, which no parser accepts, what sits between
/// the last `/` and the `@`), `password=` query parameters and libpq `key=value` pairs.
pub fn redact_url(url: &str) -> String {
    let url = redact_password_pairs(url);
    if let Ok(mut parsed) = url::Url::parse(&url)
        && parsed.has_host()
    {
        if parsed.password().is_some() && parsed.set_password(Some("***")).is_ok() {
            return parsed.to_string();
        }
        if !url[..url.find(['?', '#']).unwrap_or(url.len())].contains('@') {
            return url;
        }
    }
    redact_unparsable_userinfo(url)
}

/// The userinfo password of a string no URL parser accepts: between the first `:` of
/// the userinfo (after `://`, else after the last `/` before the `@`) and the last `@`
/// before the query.
fn redact_unparsable_userinfo(url: String) -> String {
    // Userinfo is never in the query or fragment, which may hold an `@` of their own.
    let head_end = url.find(['?', '#']).unwrap_or(url.len());
    let Some(at) = url[..head_end].rfind('@') else {
        return url;
    };
    let head = &url[..at];
    let user_start = match head.find("://") {
        Some(i) => i + 3,
        None => head.rfind('/').map_or(0, |i| i + 1),
    };
    match head[user_start..].find(':') {
        Some(colon) => format!("{}:***{}", &url[..user_start + colon], &url[at..]),
        None => url,
    }
}

/// `password=<value>` (any case, after `?`, `&`, `;`, a space or at the start; the
/// value up to the next `&`, `;` or space, or a single-quoted libpq value) -> `password=***`.
fn redact_password_pairs(s: &str) -> String {
    let lower = s.to_ascii_lowercase();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while let Some(found) = lower[i..].find("password") {
        let start = i + found;
        let after = start + "password".len();
        let boundary = start == 0 || matches!(s.as_bytes()[start - 1], b'?' | b'&' | b';' | b' ' | b'\t');
        let rest = s[after..].trim_start();
        let Some(value) = rest.strip_prefix('=').filter(|_| boundary) else {
            out.push_str(&s[i..after]);
            i = after;
            continue;
        };
        let value = value.trim_start();
        let value_start = s.len() - value.len();
        let value_len = match value.strip_prefix('\'') {
            Some(q) => q.find('\'').map_or(value.len(), |e| e + 2),
            None => value.find(['&', ';', ' ', '\t']).unwrap_or(value.len()),
        };
        out.push_str(&s[i..value_start]);
        out.push_str("***");
        i = value_start + value_len;
    }
    out.push_str(&s[i..]);
    out
}

/// Checks that `url` is a URL of one of `schemes` with a host (unless the scheme is a
/// socket one), so a mistyped URL is an error instead of being read some other way (a
/// `mysql:/u:pw@h/db` would otherwise reach the server as a database name).
pub fn check_url(url: &str, schemes: &[&str], example: &str) -> Result<(), String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("not a URL ({e}); expected {example}"))?;
    if !schemes.contains(&parsed.scheme()) {
        return Err(format!("scheme `{}:` is not one of {}; expected {example}", parsed.scheme(), schemes.join(", ")));
    }
    if !parsed.scheme().contains("unix") && parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!("no host after `{}://`; expected {example}", parsed.scheme()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{check_url, redact_url};

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(redact_url("postgres://bob:s3cr:et@db:5432/x"), "postgres://bob:***@db:5432/x");
        assert_eq!(redact_url("postgres://bob@db/x"), "postgres://bob@db/x");
        assert_eq!(redact_url("postgres://db/x?sslmode=a&password=no"), "postgres://db/x?sslmode=a&password=***");
        assert_eq!(redact_url("not a url"), "not a url");
        assert_eq!(redact_url("postgres//u:pw@h/db"), "postgres//u:***@h/db");
        assert_eq!(redact_url("mysql:/u:pw@h/db"), "mysql:/u:***@h/db");
        assert_eq!(redact_url("redis://:pw@h:6379"), "redis://:***@h:6379");
        assert_eq!(redact_url("host=db user=bob password=s3cret dbname=x"), "host=db user=bob password=*** dbname=x");
        assert_eq!(redact_url("host=db password = 'a b' port=1"), "host=db password = *** port=1");
        assert_eq!(redact_url("PASSWORD=x&sslmode=require"), "PASSWORD=***&sslmode=require");
        assert_eq!(redact_url("postgres://h/db?sslpassword=keep"), "postgres://h/db?sslpassword=keep");
        assert_eq!(
            redact_url("postgres://u:pw@h/db?application_name=a@b"),
            "postgres://u:***@h/db?application_name=a@b"
        );
        assert_eq!(redact_url("postgres://u:pa/ss@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact_url("postgres://u:p@ss@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact_url("mysql://root:pw%40x@127.0.0.1:3306/test"), "mysql://root:***@127.0.0.1:3306/test");
        assert_eq!(redact_url("amqp://guest:guest@127.0.0.1:5672/%2f"), "amqp://guest:***@127.0.0.1:5672/%2f");
        assert_eq!(redact_url("sqlite:///tmp/x.db"), "sqlite:///tmp/x.db");
    }

    #[test]
    fn malformed_urls_are_errors() {
        let pg = ["postgres", "postgresql"];
        assert!(check_url("postgres://u:pw@h:5432/db", &pg, "").is_ok());
        assert!(check_url("postgres//u:pw@h", &pg, "").is_err());
        assert!(check_url("host=h user=u", &pg, "").is_err());
        assert!(check_url("mysql:/u:pw@h/db", &["mysql"], "").is_err());
        assert!(check_url("redis+unix:///tmp/r.sock", &["redis", "redis+unix"], "").is_ok());
        for bad in ["postgres//u:pw@h", "mysql:/u:pw@h/db"] {
            let e = check_url(bad, &["mysql", "postgres"], "").unwrap_err();
            assert!(!e.contains("pw"), "{e}");
        }
    }
}
