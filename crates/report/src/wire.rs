//! Typed report fields written as the strings report.json has always held, and read
//! back from them (old reports load): closed sets by name, the backend, the verdict
//! label with its limits.

use counterlab_core::{Backend, Limit, Named, Verdict};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serializer};

/// `#[serde(with = "crate::wire::named")]`: a `Named` enum as its name.
pub mod named {
    use super::*;

    pub fn serialize<T: Named, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(v.name())
    }

    pub fn deserialize<'de, T: Named, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
        let name = String::deserialize(d)?;
        T::parse(&name).ok_or_else(|| D::Error::custom(format!("unknown name `{name}` (valid: {})", T::valid())))
    }
}

/// `#[serde(with = "crate::wire::backend")]`: `postgres`, `postgres+redis`.
pub mod backend {
    use super::*;

    pub fn serialize<S: Serializer>(b: &Backend, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&b.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Backend, D::Error> {
        let name = String::deserialize(d)?;
        Backend::parse(&name).ok_or_else(|| D::Error::custom(format!("unknown backend `{name}`")))
    }
}

/// `#[serde(with = "crate::wire::limits")]`: each limit as its text.
pub mod limits {
    use super::*;

    pub fn serialize<S: Serializer>(l: &[Limit], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(l.iter().map(Limit::text))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Limit>, D::Error> {
        Ok(Vec::<String>::deserialize(d)?.iter().map(|t| Limit::parse(t)).collect())
    }
}

/// The label a report prints: the verdict's, then its limits in brackets.
pub fn label(verdict: &Verdict, limits: &[Limit]) -> String {
    match limits {
        [] => verdict.label(),
        _ => format!("{} [{}]", verdict.label(), Limit::joined(limits)),
    }
}

/// A label as `label` writes it; a text no verdict prints (a hand-edited report) reads
/// as a failure, so it can never pass unnoticed.
pub fn parse_label(text: &str) -> Verdict {
    Verdict::parse(text).unwrap_or_default()
}
