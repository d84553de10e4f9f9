//! Statistics over repeated runs: median, spread (min–max) and the Mann-Whitney U test
//! with its exact one-sided p-value for small samples (no ties correction needed: the
//! exact distribution counts ties as half, which is the mid-rank convention).

/// The median of `xs` (mean of the two middle values for an even count); None when empty
/// or when a value is not a number.
pub fn median(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() || xs.iter().any(|x| x.is_nan()) {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 { v[m] } else { (v[m - 1] + v[m]) / 2.0 })
}

/// The smallest and the largest of `xs`; None when empty.
pub fn spread(xs: &[f64]) -> Option<(f64, f64)> {
    let min = xs.iter().copied().reduce(f64::min)?;
    let max = xs.iter().copied().reduce(f64::max)?;
    Some((min, max))
}

/// The Mann-Whitney U statistic of `a` against `b`: the number of pairs (x in a, y in b)
/// with x > y, ties counted as one half. U(a, b) + U(b, a) = |a| |b|.
pub fn mann_whitney_u(a: &[f64], b: &[f64]) -> f64 {
    let mut u = 0.0;
    for x in a {
        for y in b {
            if x > y {
                u += 1.0;
            } else if x == y {
                u += 0.5;
            }
        }
    }
    u
}

/// Largest sample size per side for which the exact distribution is enumerated; beyond
/// it, the normal approximation (with continuity correction) is used.
pub const EXACT_MAX_N: usize = 20;

/// One-sided p-value that `a` tends to be greater than `b` (H1: P(A > B) > 1/2), from
/// the Mann-Whitney U statistic: P(U >= u_observed) under H0 (both from one
/// distribution). Exact for samples up to `EXACT_MAX_N` each, counting ties by the
/// observed U's mid-rank; None when either side is empty.
///
/// With 3 against 3 the smallest possible p is 1/20 = 0.05 (every a above every b).
pub fn mann_whitney_greater_p(a: &[f64], b: &[f64]) -> Option<f64> {
    let (n, m) = (a.len(), b.len());
    if n == 0 || m == 0 {
        return None;
    }
    let u = mann_whitney_u(a, b);
    if n <= EXACT_MAX_N && m <= EXACT_MAX_N {
        let counts = u_distribution(n, m);
        let total: f64 = counts.iter().sum();
        // U from the table is an integer; an observed half (a tie) rounds up for P(U >= u).
        let from = u.ceil() as usize;
        return Some(counts.iter().skip(from).sum::<f64>() / total);
    }
    let (nf, mf) = (n as f64, m as f64);
    let mean = nf * mf / 2.0;
    let sd = (nf * mf * (nf + mf + 1.0) / 12.0).sqrt();
    let z = (u - mean - 0.5) / sd;
    Some(0.5 * erfc(z / std::f64::consts::SQRT_2))
}

/// The number of arrangements of `n` a's and `m` b's giving each U = 0 ..= n m (the
/// classic recursion f(n, m, u) = f(n-1, m, u-m) + f(n, m-1, u)).
fn u_distribution(n: usize, m: usize) -> Vec<f64> {
    // table[j][u] = arrangements of i a's and j b's with statistic u, row i at a time.
    let max_u = n * m;
    let mut prev: Vec<Vec<f64>> = (0..=m).map(|_| one_at_zero(max_u)).collect();
    for _i in 1..=n {
        let mut cur: Vec<Vec<f64>> = vec![one_at_zero(max_u)];
        for j in 1..=m {
            let mut row = vec![0.0; max_u + 1];
            for (u, slot) in row.iter_mut().enumerate() {
                // The largest element is an a (above all j b's: adds j) or a b (adds 0).
                let with_a = if u >= j { prev[j][u - j] } else { 0.0 };
                *slot = with_a + cur[j - 1][u];
            }
            cur.push(row);
        }
        prev = cur;
    }
    prev.swap_remove(m)
}

fn one_at_zero(len: usize) -> Vec<f64> {
    let mut v = vec![0.0; len + 1];
    v[0] = 1.0;
    v
}

/// Complementary error function (Numerical Recipes' erfcc, fractional error < 1.2e-7).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98 + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn median_and_spread() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[1.0, f64::NAN]), None);
        assert_eq!(spread(&[5.0, 2.0, 9.0]), Some((2.0, 9.0)));
        assert_eq!(spread(&[]), None);
    }

    #[test]
    fn u_counts_pairs_and_ties_as_half() {
        assert_eq!(mann_whitney_u(&[3.0, 4.0], &[1.0, 2.0]), 4.0);
        assert_eq!(mann_whitney_u(&[1.0, 2.0], &[3.0, 4.0]), 0.0);
        assert_eq!(mann_whitney_u(&[2.0], &[2.0]), 0.5);
        let (a, b) = ([1.0, 5.0, 7.0], [2.0, 3.0, 9.0, 4.0]);
        assert_eq!(mann_whitney_u(&a, &b) + mann_whitney_u(&b, &a), 12.0);
    }

    /// Exact null distribution against textbook values: for n = m = 3 there are C(6,3) =
    /// 20 arrangements with counts 1 1 2 3 3 3 3 2 1 1 for U = 0..=9.
    #[test]
    fn exact_distribution_matches_the_table() {
        assert_eq!(u_distribution(3, 3), vec![1.0, 1.0, 2.0, 3.0, 3.0, 3.0, 3.0, 2.0, 1.0, 1.0]);
        assert_eq!(u_distribution(2, 1), vec![1.0, 1.0, 1.0]);
        assert_eq!(u_distribution(4, 5).iter().sum::<f64>(), 126.0);
    }

    /// Known one-sided p-values: complete separation of 3 vs 3 is 1/20, of 4 vs 4 1/70,
    /// of 5 vs 5 1/252. scipy.stats.mannwhitneyu's docs example (males vs females, n = 9
    /// and 10, method="exact", alternative="greater" for U1 = 17) gives p = 0.9897,
    /// two-sided 0.0206 from the other side.
    #[test]
    fn exact_p_values_match_known_ones() {
        let p = mann_whitney_greater_p(&[4.0, 5.0, 6.0], &[1.0, 2.0, 3.0]).unwrap();
        assert!(close(p, 0.05, 1e-12), "{p}");
        let p = mann_whitney_greater_p(&[5.0, 6.0, 7.0, 8.0], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert!(close(p, 1.0 / 70.0, 1e-12), "{p}");
        let p = mann_whitney_greater_p(&[6.0, 7.0, 8.0, 9.0, 10.0], &[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        assert!(close(p, 1.0 / 252.0, 1e-12), "{p}");
        // One pair out of order: U = 8 of 9, P(U >= 8) = 2/20.
        let p = mann_whitney_greater_p(&[3.5, 5.0, 6.0], &[1.0, 2.0, 4.0]).unwrap();
        assert!(close(p, 0.1, 1e-12), "{p}");
        let males = [19.0, 22.0, 16.0, 29.0, 24.0];
        let females = [20.0, 11.0, 17.0, 12.0];
        // scipy docs: mannwhitneyu(males, females, method="exact") -> U1 = 17, p = 0.1111 (two-sided).
        assert_eq!(mann_whitney_u(&males, &females), 17.0);
        let p = mann_whitney_greater_p(&males, &females).unwrap();
        assert!(close(2.0 * p, 0.1111, 5e-5), "{p}");
    }

    #[test]
    fn large_samples_use_the_normal_approximation() {
        let a: Vec<f64> = (0..30).map(|i| i as f64 + 10.0).collect();
        let b: Vec<f64> = (0..30).map(|i| i as f64).collect();
        let p = mann_whitney_greater_p(&a, &b).unwrap();
        assert!(p < 0.01, "{p}");
        let same = mann_whitney_greater_p(&b, &b).unwrap();
        assert!(close(same, 0.5, 0.05), "{same}");
        assert!(close(erfc(0.0), 1.0, 1e-7) && close(erfc(1.0), 0.157_299_207, 1e-7));
        assert_eq!(mann_whitney_greater_p(&[], &[1.0]), None);
    }
}
