//! A Redis reply as the numbers a file-defined strategy's steps read.

/// A reply as numbers: an integer (nil is 0, OK is 1, a string must hold an integer, a
/// double is rounded) and, for an array reply, its elements the same way.
pub fn decode(v: &::redis::Value) -> Result<(i64, Option<Vec<i64>>), String> {
    use ::redis::Value as V;
    let scalar = |v: &V| -> Result<i64, String> {
        match v {
            V::Nil => Ok(0),
            V::Int(n) => Ok(*n),
            V::Okay => Ok(1),
            V::Boolean(b) => Ok(*b as i64),
            V::Double(d) => Ok(d.round() as i64),
            V::SimpleString(s) => s.trim().parse().map_err(|_| format!("reply {s:?} is not an integer")),
            V::BulkString(b) => {
                // The common case first: the digits of an integer (a counter's GET), no copy.
                if let Some(n) = std::str::from_utf8(b).ok().and_then(|s| s.parse().ok()) {
                    return Ok(n);
                }
                let s = String::from_utf8_lossy(b);
                s.trim()
                    .parse()
                    .or_else(|_| s.trim().parse::<f64>().map(|d| d.round() as i64))
                    .map_err(|_| format!("reply {:?} is not an integer", s.chars().take(40).collect::<String>()))
            }
            other => Err(format!("reply {other:?} is not a number")),
        }
    };
    match v {
        V::Array(items) | V::Set(items) => {
            let list = items.iter().map(scalar).collect::<Result<Vec<_>, _>>()?;
            Ok((list.len() as i64, Some(list)))
        }
        other => Ok((scalar(other)?, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_become_numbers() {
        use ::redis::Value as V;
        assert_eq!(decode(&V::Int(-3)).unwrap(), (-3, None));
        assert_eq!(decode(&V::Nil).unwrap(), (0, None));
        assert_eq!(decode(&V::Okay).unwrap(), (1, None));
        assert_eq!(decode(&V::BulkString(b"42".to_vec())).unwrap(), (42, None));
        assert_eq!(decode(&V::BulkString(b"2.0".to_vec())).unwrap(), (2, None));
        assert_eq!(decode(&V::BulkString(b" -5 ".to_vec())).unwrap(), (-5, None));
        assert_eq!(decode(&V::Array(vec![V::BulkString(b"7".to_vec()), V::Int(9)])).unwrap(), (2, Some(vec![7, 9])));
        assert!(decode(&V::BulkString(b"abc".to_vec())).is_err());
    }
}
