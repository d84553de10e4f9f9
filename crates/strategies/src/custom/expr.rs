//! The expression language of file-defined strategies: the values a `when` guard, an
//! op's result and a step's parameters or templates read (`user`, `id`, `each`, a seed
//! parameter, an integer, `step.field`), sums of them, one comparison, and their
//! evaluation while an op runs.

use super::redis_steps::Piece;
use super::spec::{SEED, SEED_PARAMS, StepSpec, op_name};

/// A value an expression reads: the op's user or notification id, the element of an
/// `each` loop, a seed parameter, or a step's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ref {
    User,
    Id,
    Each,
    Seed(usize),
    Field { step: usize, field: usize },
    Const(i64),
}

/// A comparison operator: `==`, `!=`, `<`, `<=`, `>`, `>=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// `left` alone (nonzero is true), or `left <cmp> right`; each side a sum of values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Expr {
    pub(super) left: Vec<Ref>,
    pub(super) cmp: Option<(Cmp, Vec<Ref>)>,
}

impl Expr {
    /// Every value the expression reads, both sides.
    pub(super) fn refs(&self) -> impl Iterator<Item = Ref> + '_ {
        self.left.iter().chain(self.cmp.iter().flat_map(|(_, r)| r.iter())).copied()
    }
}

/// A key or argument template: literal text and values.
pub(super) type Template = Vec<Piece<Ref>>;

/// Resolves `user`, `id`, `each`, a seed parameter, an integer, or `step.field` against
/// the steps before `upto` (`upto` = the step being compiled; `steps.len()` for results).
pub(super) fn resolve(word: &str, op: usize, steps: &[StepSpec], upto: usize) -> Result<Ref, String> {
    if let Ok(n) = word.parse::<i64>() {
        return Ok(Ref::Const(n));
    }
    let name = op_name(op);
    match word {
        "user" => return Ok(Ref::User),
        "id" if name == "mark_read" || name == "delete" => return Ok(Ref::Id),
        "id" => {
            return Err(format!("`id` is not a parameter of {name} (only mark_read and delete have one)"));
        }
        "each" if steps.get(upto).is_some_and(|s| s.each.is_some()) => return Ok(Ref::Each),
        "each" => return Err("`each` is a parameter only of a step with `each = \"<step>\"`".into()),
        _ => {}
    }
    if op == SEED
        && let Some(k) = SEED_PARAMS.iter().position(|p| *p == word)
    {
        return Ok(Ref::Seed(k));
    }
    let Some((step, field)) = word.split_once('.') else {
        let seed = if op == SEED { format!(", {}", SEED_PARAMS.join(", ")) } else { String::new() };
        return Err(format!("unknown parameter `{word}`: use user, id{seed}, or <step>.<field>"));
    };
    let Some(i) = steps[..upto.min(steps.len())].iter().position(|s| s.name == step) else {
        let later = steps[upto.min(steps.len())..].iter().any(|s| s.name == step);
        return Err(if later {
            format!("`{word}` refers to step `{step}`, which runs later")
        } else {
            format!("`{word}` refers to no step named `{step}` in {name}")
        });
    };
    let fields = steps[i].fields();
    match fields.iter().position(|f| *f == field) {
        Some(f) => Ok(Ref::Field { step: i, field: f }),
        None => Err(format!("step `{step}` has no output `{field}`; it has {}", fields.join(", "))),
    }
}

/// `a`, `a + b ...`, or either compared with another: `a <op> b`.
pub(super) fn parse_expr(text: &str, op: usize, steps: &[StepSpec], upto: usize) -> Result<Expr, String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let cmp = |w: &str| match w {
        "==" => Some(Cmp::Eq),
        "!=" => Some(Cmp::Ne),
        "<" => Some(Cmp::Lt),
        "<=" => Some(Cmp::Le),
        ">" => Some(Cmp::Gt),
        ">=" => Some(Cmp::Ge),
        _ => None,
    };
    let sum = |side: &[&str]| -> Result<Vec<Ref>, String> {
        if side.is_empty() || side.len().is_multiple_of(2) || side.iter().skip(1).step_by(2).any(|w| *w != "+") {
            return Err(format!(
                "cannot read `{text}`: write values joined by ` + `, optionally compared (== != < <= > >=) with another"
            ));
        }
        // A guard is read before its own step runs: `each` means nothing there.
        side.iter().step_by(2).map(|w| resolve(w, op, steps, upto).and_then(no_each)).collect()
    };
    match words.iter().position(|w| cmp(w).is_some()) {
        None => Ok(Expr { left: sum(&words)?, cmp: None }),
        Some(i) => {
            let c = cmp(words[i]).expect("found above");
            Ok(Expr { left: sum(&words[..i])?, cmp: Some((c, sum(&words[i + 1..])?)) })
        }
    }
}

/// Refuses `each` in a guard (see `parse_expr`).
fn no_each(r: Ref) -> Result<Ref, String> {
    match r {
        Ref::Each => Err("`each` can be used in the step's statement, keys and arguments, not in a guard".into()),
        r => Ok(r),
    }
}

/// The values an op's expressions can read besides step outputs.
#[derive(Clone, Copy, Default)]
pub(super) struct Env {
    pub(super) user: i64,
    pub(super) id: i64,
    pub(super) each: i64,
    /// The seed parameters, in `SEED_PARAMS` order.
    pub(super) seed: [i64; 4],
}

/// One value, given the op's environment and the outputs of its steps so far.
pub(super) fn eval_ref(r: Ref, env: &Env, vals: &[Vec<i64>]) -> i64 {
    match r {
        Ref::User => env.user,
        Ref::Id => env.id,
        Ref::Each => env.each,
        Ref::Seed(k) => env.seed[k],
        Ref::Const(c) => c,
        Ref::Field { step, field } => vals[step][field],
    }
}

/// An expression's value: the sum (saturating), or 1/0 for a comparison.
pub(super) fn eval(e: &Expr, env: &Env, vals: &[Vec<i64>]) -> i64 {
    let sum = |side: &[Ref]| side.iter().fold(0i64, |acc, r| acc.saturating_add(eval_ref(*r, env, vals)));
    let a = sum(&e.left);
    match &e.cmp {
        None => a,
        Some((c, right)) => {
            let b = sum(right);
            (match c {
                Cmp::Eq => a == b,
                Cmp::Ne => a != b,
                Cmp::Lt => a < b,
                Cmp::Le => a <= b,
                Cmp::Gt => a > b,
                Cmp::Ge => a >= b,
            }) as i64
        }
    }
}

/// A template's text: the literal pieces and the values, with `prefix` in front (keys).
pub(super) fn expand(t: &Template, prefix: &str, env: &Env, vals: &[Vec<i64>]) -> String {
    let mut s = String::from(prefix);
    for p in t {
        match p {
            Piece::Lit(l) => s.push_str(l),
            Piece::Val(r) => s.push_str(&eval_ref(*r, env, vals).to_string()),
        }
    }
    s
}
