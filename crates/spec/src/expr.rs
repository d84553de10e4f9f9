//! The expression language of file-defined strategies: the values a `when` guard, an
//! op's result, a retry's `until` and a step's parameters or templates read (`user`,
//! `id`, `each`, a seed parameter, an integer, `step.field`), resolved against the op's
//! steps, and their evaluation while an op runs (integer arithmetic saturates; a
//! division by zero is an error, never a panic). The syntax is in `ast.rs`.

use crate::ast::{Cmp, Expr, Op, Ref, parse};
use crate::redis_steps::Piece;
use crate::spec::{SEED, SEED_PARAMS, StepSpec, op_name};

/// A key or argument template: literal text and expressions.
pub type Template = Vec<Piece<Expr>>;

/// Resolves `user`, `id`, `each`, a seed parameter, an integer, or `step.field` against
/// the steps before `upto` (`upto` = the step being compiled; `steps.len()` for results).
pub fn resolve(word: &str, op: usize, steps: &[StepSpec], upto: usize) -> Result<Ref, String> {
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

/// A guard, a result or a retry's `until`: an expression over the values before step
/// `upto` (see `ast.rs` for the syntax); `each` is refused (a guard is read before its
/// step's loop runs).
pub fn parse_expr(text: &str, op: usize, steps: &[StepSpec], upto: usize) -> Result<Expr, String> {
    parse(text, |w| resolve(w, op, steps, upto).and_then(no_each))
}

/// A template placeholder (`{user % 16}`, `{get.value + 1}`): an expression over the
/// values step `upto` can read, `each` included.
pub fn parse_value(text: &str, op: usize, steps: &[StepSpec], upto: usize) -> Result<Expr, String> {
    parse(text, |w| resolve(w, op, steps, upto))
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
pub struct Env {
    pub user: i64,
    pub id: i64,
    pub each: i64,
    /// The seed parameters, in `SEED_PARAMS` order.
    pub seed: [i64; 4],
}

/// One value, given the op's environment and the outputs of its steps so far.
pub fn eval_ref(r: Ref, env: &Env, vals: &[Vec<i64>]) -> i64 {
    match r {
        Ref::User => env.user,
        Ref::Id => env.id,
        Ref::Each => env.each,
        Ref::Seed(k) => env.seed[k],
        Ref::Const(c) => c,
        Ref::Field { step, field } => vals[step][field],
    }
}

/// An expression's value: arithmetic saturates at the i64 bounds, comparisons and
/// `and`/`or`/`not` give 1 or 0 (`and`/`or` read their right side only when needed);
/// a division or remainder by zero is an error.
pub fn eval(e: &Expr, env: &Env, vals: &[Vec<i64>]) -> Result<i64, String> {
    Ok(match e {
        Expr::Val(r) => eval_ref(*r, env, vals),
        Expr::Neg(a) => eval(a, env, vals)?.saturating_neg(),
        Expr::Not(a) => (eval(a, env, vals)? == 0) as i64,
        Expr::Bin(Op::And, a, b) => (eval(a, env, vals)? != 0 && eval(b, env, vals)? != 0) as i64,
        Expr::Bin(Op::Or, a, b) => (eval(a, env, vals)? != 0 || eval(b, env, vals)? != 0) as i64,
        Expr::Bin(op, a, b) => binary(*op, eval(a, env, vals)?, eval(b, env, vals)?)?,
    })
}

/// `a <op> b` for the arithmetic and comparison operators.
fn binary(op: Op, a: i64, b: i64) -> Result<i64, String> {
    Ok(match op {
        Op::Add => a.saturating_add(b),
        Op::Sub => a.saturating_sub(b),
        Op::Mul => a.saturating_mul(b),
        Op::Div | Op::Rem if b == 0 => {
            return Err(format!("division by zero: {a} {} 0", if op == Op::Div { "/" } else { "%" }));
        }
        Op::Div => a.saturating_div(b),
        // i64::MIN % -1 overflows in Rust; the remainder is 0.
        Op::Rem => a.checked_rem(b).unwrap_or(0),
        Op::Cmp(c) => {
            (match c {
                Cmp::Eq => a == b,
                Cmp::Ne => a != b,
                Cmp::Lt => a < b,
                Cmp::Le => a <= b,
                Cmp::Gt => a > b,
                Cmp::Ge => a >= b,
            }) as i64
        }
        Op::And | Op::Or => unreachable!("short-circuited in eval"),
    })
}

/// A template's text: the literal pieces and the values, with `prefix` in front (keys).
pub fn expand(t: &Template, prefix: &str, env: &Env, vals: &[Vec<i64>]) -> Result<String, String> {
    let mut s = String::new();
    expand_into(&mut s, t, prefix, env, vals)?;
    Ok(s)
}

/// `expand` into `out` (cleared first): an op's keys and arguments reuse one buffer.
pub fn expand_into(out: &mut String, t: &Template, prefix: &str, env: &Env, vals: &[Vec<i64>]) -> Result<(), String> {
    use std::fmt::Write;
    out.clear();
    out.push_str(prefix);
    for p in t {
        match p {
            Piece::Lit(l) => out.push_str(l),
            Piece::Val(e) => write!(out, "{}", eval(e, env, vals)?).expect("a String takes any text"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::fixtures::{redis_step, sql_step};

    const CREATE: usize = 0;
    const MARK_READ: usize = 1;
    const DELETE: usize = 2;
    const MARK_ALL_READ: usize = 3;
    const READ_COUNT: usize = 4;

    /// `sel` (SQL, returns is_read) then `get` (Redis, returns a, b).
    fn two_steps() -> Vec<StepSpec> {
        vec![sql_step("sel", "select is_read from t", &["is_read"]), redis_step("get", "HMGET", &["h"], &["a", "b"])]
    }

    /// Parses `text` as a result of `op` over `steps` (every step already ran).
    fn result(text: &str, op: usize, steps: &[StepSpec]) -> Result<Expr, String> {
        parse_expr(text, op, steps, steps.len())
    }

    fn field(step: usize, field: usize) -> Ref {
        Ref::Field { step, field }
    }

    fn val(r: Ref) -> Expr {
        Expr::Val(r)
    }

    fn bin(op: Op, a: Expr, b: Expr) -> Expr {
        Expr::Bin(op, Box::new(a), Box::new(b))
    }

    #[test]
    fn a_lone_value_is_an_expression() {
        let none: &[StepSpec] = &[];
        assert_eq!(result("user", CREATE, none), Ok(val(Ref::User)));
        assert_eq!(result("42", CREATE, none), Ok(val(Ref::Const(42))));
        assert_eq!(result("-3", READ_COUNT, none), Ok(val(Ref::Const(-3))));
        assert_eq!(result("  id  ", MARK_READ, none), Ok(val(Ref::Id)));
        assert_eq!(result("id", DELETE, none), Ok(val(Ref::Id)));
    }

    #[test]
    fn sums_join_values_with_plus() {
        let steps = two_steps();
        let e = result("sel.rows + 1 + user + get.b", CREATE, &steps).unwrap();
        let want = bin(
            Op::Add,
            bin(Op::Add, bin(Op::Add, val(field(0, 0)), val(Ref::Const(1))), val(Ref::User)),
            val(field(1, 2)),
        );
        assert_eq!(e, want);
    }

    #[test]
    fn every_comparison_parses() {
        let steps = two_steps();
        for (text, cmp) in
            [("==", Cmp::Eq), ("!=", Cmp::Ne), ("<", Cmp::Lt), ("<=", Cmp::Le), (">", Cmp::Gt), (">=", Cmp::Ge)]
        {
            let e = result(&format!("sel.is_read {text} 0"), CREATE, &steps).unwrap();
            assert_eq!(e, bin(Op::Cmp(cmp), val(field(0, 2)), val(Ref::Const(0))), "{text}");
        }
    }

    #[test]
    fn both_sides_of_a_comparison_may_be_sums() {
        let steps = two_steps();
        let e = result("get.a + get.b >= sel.rows + 1", CREATE, &steps).unwrap();
        assert_eq!(e.refs(), [field(1, 1), field(1, 2), field(0, 0), Ref::Const(1)]);
        let Expr::Bin(Op::Cmp(Cmp::Ge), _, _) = e else { panic!("{e:?}") };
    }

    #[test]
    fn step_outputs_are_numbered_as_the_step_lists_them() {
        // SQL: rows, last_id, then the returned columns; Redis and Lua: value, then the
        // names of the array reply's elements.
        let steps = two_steps();
        let expect = [
            ("sel.rows", field(0, 0)),
            ("sel.last_id", field(0, 1)),
            ("sel.is_read", field(0, 2)),
            ("get.value", field(1, 0)),
            ("get.a", field(1, 1)),
            ("get.b", field(1, 2)),
        ];
        for (word, r) in expect {
            assert_eq!(resolve(word, CREATE, &steps, 2), Ok(r), "{word}");
        }
    }

    #[test]
    fn malformed_expressions_name_the_syntax() {
        let steps = two_steps();
        for text in ["", "sel.rows +", "+ sel.rows", "sel.rows get.a", "user ==", "== 1", "user == 1 == 2", "user = 1"]
        {
            let e = result(text, CREATE, &steps).unwrap_err();
            assert!(e.starts_with(&format!("cannot read `{text}`: ")), "{text:?}: {e}");
        }
        // Operators need no spaces around them.
        assert!(result("user+1", CREATE, &steps).is_ok());
        assert!(result("user - 1", CREATE, &steps).is_ok());
    }

    #[test]
    fn id_is_a_parameter_of_mark_read_and_delete_only() {
        for (op, name) in
            [(CREATE, "create"), (MARK_ALL_READ, "mark_all_read"), (READ_COUNT, "read_count"), (SEED, "redis_seed")]
        {
            assert_eq!(
                resolve("id", op, &[], 0),
                Err(format!("`id` is not a parameter of {name} (only mark_read and delete have one)"))
            );
        }
    }

    #[test]
    fn unknown_parameters_list_the_known_ones() {
        assert_eq!(
            resolve("nid", CREATE, &[], 0),
            Err("unknown parameter `nid`: use user, id, or <step>.<field>".into())
        );
        assert_eq!(
            resolve("nid", SEED, &[], 0),
            Err("unknown parameter `nid`: use user, id, unread, total, read, first_id, or <step>.<field>".into())
        );
    }

    #[test]
    fn seed_parameters_exist_only_in_the_seed() {
        for (k, p) in SEED_PARAMS.iter().enumerate() {
            assert_eq!(resolve(p, SEED, &[], 0), Ok(Ref::Seed(k)), "{p}");
        }
        assert_eq!(
            resolve("unread", CREATE, &[], 0),
            Err("unknown parameter `unread`: use user, id, or <step>.<field>".into())
        );
    }

    #[test]
    fn step_references_must_name_an_earlier_step_and_output() {
        let steps = two_steps();
        // While compiling step `get` (index 1), only `sel` has run.
        assert_eq!(resolve("sel.rows", CREATE, &steps, 1), Ok(field(0, 0)));
        assert_eq!(
            resolve("get.value", CREATE, &steps, 1),
            Err("`get.value` refers to step `get`, which runs later".into())
        );
        assert_eq!(
            resolve("sel.rows", CREATE, &steps, 0),
            Err("`sel.rows` refers to step `sel`, which runs later".into())
        );
        assert_eq!(
            resolve("nope.rows", DELETE, &steps, 2),
            Err("`nope.rows` refers to no step named `nope` in delete".into())
        );
        assert_eq!(
            resolve("sel.value", CREATE, &steps, 2),
            Err("step `sel` has no output `value`; it has rows, last_id, is_read".into())
        );
        assert_eq!(
            resolve("get.rows", CREATE, &steps, 2),
            Err("step `get` has no output `rows`; it has value, a, b".into())
        );
    }

    #[test]
    fn each_is_a_parameter_of_a_looping_step_only_and_never_of_its_guard() {
        let mut steps = two_steps();
        steps.push(StepSpec { each: Some("get".into()), ..redis_step("del", "DEL", &["k:{each}"], &[]) });
        assert_eq!(resolve("each", CREATE, &steps, 2), Ok(Ref::Each));
        let not_here = "`each` is a parameter only of a step with `each = \"<step>\"`";
        assert_eq!(resolve("each", CREATE, &steps, 1), Err(not_here.into()));
        // A result is read after every step, where no loop is running.
        assert_eq!(result("each", CREATE, &steps), Err(not_here.into()));
        let in_guard = "`each` can be used in the step's statement, keys and arguments, not in a guard";
        assert_eq!(parse_expr("each == 1", CREATE, &steps, 2), Err(in_guard.into()));
        assert_eq!(parse_expr("1 == get.a + each", CREATE, &steps, 2), Err(in_guard.into()));
        // A template's placeholder may read it.
        assert_eq!(parse_value("each % 4", CREATE, &steps, 2), Ok(bin(Op::Rem, val(Ref::Each), val(Ref::Const(4)))));
    }

    #[test]
    fn the_first_bad_value_is_the_one_reported() {
        let steps = two_steps();
        assert_eq!(
            result("nope.rows == sel.nope", CREATE, &steps),
            Err("`nope.rows` refers to no step named `nope` in create".into())
        );
    }

    fn env() -> Env {
        Env { user: 7, id: 11, each: 3, seed: [4, 5, 1, 31] }
    }

    #[test]
    fn values_read_the_env_and_the_step_outputs() {
        let vals = vec![vec![1, 0, 9], vec![2, 20, 30]];
        let e = env();
        assert_eq!(eval_ref(Ref::User, &e, &vals), 7);
        assert_eq!(eval_ref(Ref::Id, &e, &vals), 11);
        assert_eq!(eval_ref(Ref::Each, &e, &vals), 3);
        assert_eq!(eval_ref(Ref::Seed(0), &e, &vals), 4);
        assert_eq!(eval_ref(Ref::Seed(3), &e, &vals), 31);
        assert_eq!(eval_ref(Ref::Const(-2), &e, &vals), -2);
        assert_eq!(eval_ref(field(0, 2), &e, &vals), 9);
        assert_eq!(eval_ref(field(1, 1), &e, &vals), 20);
    }

    #[test]
    fn sums_saturate_and_comparisons_give_one_or_zero() {
        let steps = two_steps();
        let vals = vec![vec![1, 0, 0], vec![2, 20, 30]];
        let ev = |text: &str, vals: &[Vec<i64>]| eval(&result(text, CREATE, &steps).unwrap(), &env(), vals);
        assert_eq!(ev("get.a + get.b + user", &vals), Ok(57));
        assert_eq!(ev("sel.rows + -1", &vals), Ok(0));
        let huge = vec![vec![i64::MAX, 0, 0], vec![i64::MIN, 0, 0]];
        assert_eq!(ev("sel.rows + 1", &huge), Ok(i64::MAX));
        assert_eq!(ev("get.value + -1", &huge), Ok(i64::MIN));
        assert_eq!(ev("get.value - 1", &huge), Ok(i64::MIN));
        assert_eq!(ev("sel.rows * 2", &huge), Ok(i64::MAX));
        assert_eq!(ev("-get.value", &huge), Ok(i64::MAX));
        assert_eq!(ev("get.value / -1", &huge), Ok(i64::MAX));
        assert_eq!(ev("get.value % -1", &huge), Ok(0));
        for (text, want) in [
            ("get.a == 20", 1),
            ("get.a == 21", 0),
            ("get.a != 21", 1),
            ("get.a != 20", 0),
            ("get.a < get.b", 1),
            ("get.b < get.a", 0),
            ("get.a <= 20", 1),
            ("get.a <= 19", 0),
            ("get.b > get.a", 1),
            ("get.a > get.a", 0),
            ("get.a >= 20", 1),
            ("get.a >= 21", 0),
            ("get.a + get.b == 50", 1),
            ("sel.is_read == 0", 1),
        ] {
            assert_eq!(ev(text, &vals), Ok(want), "{text}");
        }
    }

    #[test]
    fn arithmetic_and_logic_evaluate_with_precedence() {
        let steps = two_steps();
        let vals = vec![vec![1, 0, 0], vec![2, 20, 30]];
        let ev = |text: &str| eval(&result(text, CREATE, &steps).unwrap(), &env(), &vals);
        for (text, want) in [
            ("user % 4", 3),
            ("get.b - get.a * 2 + 1", -9),
            ("(get.b - get.a) * 2", 20),
            ("get.b / 7", 4),
            ("-get.b / 7", -4),
            ("-7 % 3", -1),
            ("get.a == 20 and get.b == 30", 1),
            ("get.a == 20 and get.b == 31", 0),
            ("get.a == 21 or get.b == 30", 1),
            ("not get.a == 20", 0),
            ("not (sel.is_read or sel.last_id)", 1),
            ("get.a > 0 and get.b", 1),
        ] {
            assert_eq!(ev(text), Ok(want), "{text}");
        }
        assert_eq!(ev("get.a / sel.is_read"), Err("division by zero: 20 / 0".into()));
        assert_eq!(ev("user % (get.a - 20)"), Err("division by zero: 7 % 0".into()));
        // `and`/`or` read their right side only when needed.
        assert_eq!(ev("sel.is_read and 1 / 0"), Ok(0));
        assert_eq!(ev("sel.rows or 1 / 0"), Ok(1));
    }

    #[test]
    fn templates_expand_to_text_with_the_prefix_in_front() {
        let t: Template = vec![
            Piece::Lit("u:".into()),
            Piece::Val(val(Ref::User)),
            Piece::Lit(":n:".into()),
            Piece::Val(val(Ref::Each)),
        ];
        assert_eq!(expand(&t, "cl:ns:", &env(), &[]), Ok("cl:ns:u:7:n:3".into()));
        assert_eq!(expand(&t, "", &env(), &[]), Ok("u:7:n:3".into()));
        assert_eq!(expand(&vec![Piece::Val(val(field(0, 1)))], "", &env(), &[vec![0, -5]]), Ok("-5".into()));
        let slot = vec![Piece::Val(bin(Op::Rem, val(Ref::User), val(Ref::Const(4))))];
        assert_eq!(expand(&slot, "", &env(), &[]), Ok("3".into()));
        let zero = vec![Piece::Val(bin(Op::Div, val(Ref::User), val(Ref::Const(0))))];
        assert!(expand(&zero, "", &env(), &[]).is_err());
    }
}
