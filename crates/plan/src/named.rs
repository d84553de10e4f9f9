//! Serialising closed-set values by their stable names, so the plan printed into a
//! report reads exactly as the scenario file spelt it.

use counterlab_core::Named;
use serde::Serializer;
use serde::ser::SerializeSeq;

pub fn one<S: Serializer, T: Named>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(v.name())
}

pub fn opt<S: Serializer, T: Named>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_some(v.name()),
        None => s.serialize_none(),
    }
}

pub fn list<S: Serializer, T: Named>(v: &[T], s: S) -> Result<S::Ok, S::Error> {
    let mut seq = s.serialize_seq(Some(v.len()))?;
    for x in v {
        seq.serialize_element(x.name())?;
    }
    seq.end()
}

pub fn map_of_lists<S: Serializer, T: Named>(
    v: &std::collections::BTreeMap<String, Vec<T>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(v.iter().map(|(k, l)| (k, l.iter().map(|x| x.name()).collect::<Vec<_>>())))
}

/// The thresholds as the scenario wrote them: `metric` by name, `op`, `strategies`, `limit`.
pub fn thresholds<S: Serializer>(v: &[counterlab_core::Threshold], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeStruct;
    struct One<'a>(&'a counterlab_core::Threshold);
    impl serde::Serialize for One<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut st = s.serialize_struct("Threshold", 4)?;
            st.serialize_field("metric", self.0.metric.name())?;
            st.serialize_field("op", &self.0.op)?;
            st.serialize_field("strategies", &self.0.strategies)?;
            st.serialize_field("limit", &self.0.limit)?;
            st.end()
        }
    }
    let mut seq = s.serialize_seq(Some(v.len()))?;
    for t in v {
        seq.serialize_element(&One(t))?;
    }
    seq.end()
}
