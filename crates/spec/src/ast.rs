//! The syntax of file-defined strategies' expressions: tokens, the tree (`Expr`) and a
//! precedence-climbing parser. `or` < `and` < `not` < comparisons (not chained) <
//! `+ -` < `* / %` < unary `-` < values and parentheses; the values are resolved by the
//! caller (see `expr.rs`), so this file knows no step or parameter.

/// A value an expression reads: the op's user or notification id, the element of an
/// `each` loop, a seed parameter, a step's output, or an integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ref {
    User,
    Id,
    Each,
    Seed(usize),
    Field { step: usize, field: usize },
    Const(i64),
}

/// A comparison operator: `==`, `!=`, `<`, `<=`, `>`, `>=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// A binary operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Cmp(Cmp),
    And,
    Or,
}

/// An expression: a value, `-e`, `not e`, or `a <op> b`. Truth is nonzero; comparisons,
/// `and`, `or` and `not` give 1 or 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    Val(Ref),
    Neg(Box<Expr>),
    Not(Box<Expr>),
    Bin(Op, Box<Expr>, Box<Expr>),
}

impl Expr {
    /// Every value the expression reads, left to right.
    pub fn refs(&self) -> Vec<Ref> {
        let mut out = Vec::new();
        self.collect(&mut out);
        out
    }

    fn collect(&self, out: &mut Vec<Ref>) {
        match self {
            Expr::Val(r) => out.push(*r),
            Expr::Neg(e) | Expr::Not(e) => e.collect(out),
            Expr::Bin(_, a, b) => {
                a.collect(out);
                b.collect(out);
            }
        }
    }

    fn bin(op: Op, a: Expr, b: Expr) -> Expr {
        Expr::Bin(op, Box::new(a), Box::new(b))
    }
}

/// Longest expression text, and deepest nesting (parentheses, `not`, unary minus).
pub const MAX_LEN: usize = 1000;
const MAX_DEPTH: usize = 32;

/// A token: a word (a value's name, an integer, `and`/`or`/`not`) or an operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok<'a> {
    Word(&'a str),
    Sym(&'static str),
}

const SYMS: [&str; 14] = ["==", "!=", "<=", ">=", "<", ">", "+", "-", "*", "/", "%", "(", ")", "="];

/// Splits `text` into words (letters, digits, `_`, `.`) and operators.
fn tokens(text: &str) -> Result<Vec<Tok<'_>>, String> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    while let Some(c) = rest.chars().next() {
        if word(c) {
            let end = rest.find(|c: char| !word(c)).unwrap_or(rest.len());
            out.push(Tok::Word(&rest[..end]));
            rest = &rest[end..];
        } else if let Some(s) = SYMS.iter().find(|s| rest.starts_with(**s)) {
            if *s == "=" {
                return Err("`=` is not an operator: compare with `==`".into());
            }
            out.push(Tok::Sym(s));
            rest = &rest[s.len()..];
        } else {
            return Err(format!("unexpected character {c:?}"));
        }
        rest = rest.trim_start();
    }
    Ok(out)
}

/// The binary operator a token is, with its precedence (higher binds tighter).
fn binary(t: Tok<'_>) -> Option<(Op, u8)> {
    Some(match t {
        Tok::Word("or") => (Op::Or, 1),
        Tok::Word("and") => (Op::And, 2),
        Tok::Sym("==") => (Op::Cmp(Cmp::Eq), 4),
        Tok::Sym("!=") => (Op::Cmp(Cmp::Ne), 4),
        Tok::Sym("<") => (Op::Cmp(Cmp::Lt), 4),
        Tok::Sym("<=") => (Op::Cmp(Cmp::Le), 4),
        Tok::Sym(">") => (Op::Cmp(Cmp::Gt), 4),
        Tok::Sym(">=") => (Op::Cmp(Cmp::Ge), 4),
        Tok::Sym("+") => (Op::Add, 5),
        Tok::Sym("-") => (Op::Sub, 5),
        Tok::Sym("*") => (Op::Mul, 6),
        Tok::Sym("/") => (Op::Div, 6),
        Tok::Sym("%") => (Op::Rem, 6),
        _ => return None,
    })
}

/// Precedence of `not`'s operand: it takes a comparison (`not a == b` is `not (a == b)`).
const NOT_PREC: u8 = 3;
/// Precedence of unary minus's operand: a value or a parenthesis.
const NEG_PREC: u8 = 7;

/// Why a text is not an expression (prefixed with the text by `parse`), or a value's
/// own error (passed through as it is).
enum Fail {
    Syntax(String),
    Value(String),
}

struct Parser<'a, F> {
    toks: Vec<Tok<'a>>,
    pos: usize,
    value: F,
}

impl<'a, F: FnMut(&str) -> Result<Ref, String>> Parser<'a, F> {
    fn peek(&self) -> Option<Tok<'a>> {
        self.toks.get(self.pos).copied()
    }

    fn next(&mut self) -> Option<Tok<'a>> {
        let t = self.peek();
        self.pos += 1;
        t
    }

    /// An expression whose binary operators bind at least as tightly as `min`.
    fn expr(&mut self, min: u8, depth: usize) -> Result<Expr, Fail> {
        if depth > MAX_DEPTH {
            return Err(Fail::Syntax(format!("nested more than {MAX_DEPTH} deep")));
        }
        let mut left = self.unary(depth)?;
        while let Some((op, prec)) = self.peek().and_then(binary) {
            if prec < min {
                break;
            }
            self.pos += 1;
            let right = self.expr(prec + 1, depth + 1)?;
            if let (Op::Cmp(_), Some((Op::Cmp(_), _))) = (op, self.peek().and_then(binary)) {
                return Err(Fail::Syntax("comparisons do not chain: join them with `and`".into()));
            }
            left = Expr::bin(op, left, right);
        }
        Ok(left)
    }

    /// `not e`, `-e`, `(e)` or a value.
    fn unary(&mut self, depth: usize) -> Result<Expr, Fail> {
        match self.next() {
            Some(Tok::Word("not")) => Ok(Expr::Not(Box::new(self.expr(NOT_PREC, depth + 1)?))),
            Some(Tok::Sym("-")) => match self.peek() {
                // `-3` is the integer, so i64::MIN can be written.
                Some(Tok::Word(w)) if w.starts_with(|c: char| c.is_ascii_digit()) => {
                    self.pos += 1;
                    self.value(&format!("-{w}"))
                }
                _ => Ok(Expr::Neg(Box::new(self.expr(NEG_PREC, depth + 1)?))),
            },
            Some(Tok::Sym("(")) => {
                let e = self.expr(0, depth + 1)?;
                match self.next() {
                    Some(Tok::Sym(")")) => Ok(e),
                    _ => Err(Fail::Syntax("`(` without `)`".into())),
                }
            }
            Some(Tok::Word(w)) if !matches!(w, "and" | "or") => self.value(w),
            Some(t) => Err(Fail::Syntax(format!("expected a value, found {}", show(t)))),
            None => Err(Fail::Syntax("expected a value, found the end".into())),
        }
    }

    fn value(&mut self, w: &str) -> Result<Expr, Fail> {
        if w.starts_with(|c: char| c.is_ascii_digit()) && w.parse::<i64>().is_err() {
            return Err(Fail::Syntax(format!("`{w}` is not an integer")));
        }
        (self.value)(w).map(Expr::Val).map_err(Fail::Value)
    }
}

fn show(t: Tok<'_>) -> String {
    match t {
        Tok::Word(w) | Tok::Sym(w) => format!("`{w}`"),
    }
}

/// Parses `text`, resolving each value's name with `value`. A syntax error reads
/// "cannot read `<text>`: <why>"; a value's error is returned as `value` gave it.
pub fn parse(text: &str, value: impl FnMut(&str) -> Result<Ref, String>) -> Result<Expr, String> {
    let syntax = |why: String| format!("cannot read `{text}`: {why}");
    if text.len() > MAX_LEN {
        return Err(syntax(format!("longer than {MAX_LEN} characters")));
    }
    let mut p = Parser { toks: tokens(text).map_err(syntax)?, pos: 0, value };
    let e = p.expr(0, 0).map_err(|f| match f {
        Fail::Syntax(why) => syntax(why),
        Fail::Value(m) => m,
    })?;
    match p.peek() {
        None => Ok(e),
        Some(Tok::Sym(")")) => Err(syntax("`)` without `(`".into())),
        Some(t) => Err(syntax(format!("expected an operator, found {}", show(t)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values: integers, and `a`..`e` as steps 0..4's first output.
    fn p(text: &str) -> Result<Expr, String> {
        parse(text, |w| match w.parse::<i64>() {
            Ok(n) => Ok(Ref::Const(n)),
            Err(_) if w.len() == 1 && ("a"..="e").contains(&w) => {
                Ok(Ref::Field { step: (w.as_bytes()[0] - b'a') as usize, field: 0 })
            }
            Err(_) => Err(format!("unknown `{w}`")),
        })
    }

    fn v(step: usize) -> Expr {
        Expr::Val(Ref::Field { step, field: 0 })
    }

    fn n(k: i64) -> Expr {
        Expr::Val(Ref::Const(k))
    }

    #[test]
    fn precedence_climbs_from_or_to_unary_minus() {
        use Expr::{Neg, Not};
        let b = Expr::bin;
        assert_eq!(p("a + b * c").unwrap(), b(Op::Add, v(0), b(Op::Mul, v(1), v(2))));
        assert_eq!(p("a - b - c").unwrap(), b(Op::Sub, b(Op::Sub, v(0), v(1)), v(2)));
        assert_eq!(p("(a + b) % 16").unwrap(), b(Op::Rem, b(Op::Add, v(0), v(1)), n(16)));
        assert_eq!(
            p("a == 1 or b != 2 and not c < 3").unwrap(),
            b(
                Op::Or,
                b(Op::Cmp(Cmp::Eq), v(0), n(1)),
                b(Op::And, b(Op::Cmp(Cmp::Ne), v(1), n(2)), Not(Box::new(b(Op::Cmp(Cmp::Lt), v(2), n(3)))))
            )
        );
        assert_eq!(p("-a * b").unwrap(), b(Op::Mul, Neg(Box::new(v(0))), v(1)));
        assert_eq!(p("-3").unwrap(), n(-3));
        assert_eq!(p("-9223372036854775808").unwrap(), n(i64::MIN));
        assert_eq!(p("a+-1").unwrap(), b(Op::Add, v(0), n(-1)));
        assert_eq!(p("not not a").unwrap(), Not(Box::new(Not(Box::new(v(0))))));
        assert_eq!(p("a<=b").unwrap(), b(Op::Cmp(Cmp::Le), v(0), v(1)));
    }

    #[test]
    fn refs_come_left_to_right() {
        let e = p("(a + 2) * b == not c").unwrap();
        assert_eq!(e.refs().len(), 4);
        assert_eq!(e.refs()[3], Ref::Field { step: 2, field: 0 });
    }

    #[test]
    fn bad_syntax_says_why() {
        for (text, why) in [
            ("", "expected a value, found the end"),
            ("a +", "expected a value, found the end"),
            ("+ a", "expected a value, found `+`"),
            ("a b", "expected an operator, found `b`"),
            ("a == 1 == 2", "comparisons do not chain: join them with `and`"),
            ("a < b > c", "comparisons do not chain"),
            ("a = 1", "`=` is not an operator: compare with `==`"),
            ("(a + 1", "`(` without `)`"),
            ("a + 1)", "`)` without `(`"),
            ("a & b", "unexpected character '&'"),
            ("a and or b", "expected a value, found `or`"),
            ("99999999999999999999", "`99999999999999999999` is not an integer"),
        ] {
            let e = p(text).unwrap_err();
            assert!(e.starts_with(&format!("cannot read `{text}`: ")), "{text:?}: {e}");
            assert!(e.contains(why), "{text:?}: {e}");
        }
    }

    #[test]
    fn value_errors_pass_through_and_depth_and_length_are_bounded() {
        assert_eq!(p("a + nope"), Err("unknown `nope`".into()));
        let deep = format!("{}a{}", "(".repeat(40), ")".repeat(40));
        assert!(p(&deep).unwrap_err().contains("nested more than 32 deep"));
        assert!(p(&"-".repeat(40)).unwrap_err().contains("nested"));
        assert!(p(&"a + ".repeat(300)).unwrap_err().contains("longer than 1000"));
    }
}
