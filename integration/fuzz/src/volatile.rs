//! Queries with volatile functions (`random()`, `uuid()`) have no one right
//! answer to compare, but invariants every right answer keeps: two
//! evaluations of `random()` never meet in an equi-join (a subtree shared
//! between two uses would), a sample of `random() < p` keeps a count of rows
//! within a binomial bound (a filter evaluated twice keeps about p² of
//! them), every `uuid()` is distinct.

use crate::rng::Rng;

#[derive(Debug, Clone, PartialEq)]
pub enum Expect {
    /// The count is 0.
    Zero,
    /// The count is Binomial(n, p), `n` the answer of `whole`.
    Binomial { whole: String, p: f64 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct VolatileCheck {
    pub sql: String,
    pub expect: Expect,
}

/// A volatile query over two of `tables` (chosen at random).
pub fn check(rng: &mut Rng, tables: &[String]) -> VolatileCheck {
    let t = rng.pick(tables).clone();
    let u = rng.pick(tables).clone();
    let key = *rng.pick(&["k0", "k1", "k2"]);
    let p = *rng.pick(&[0.5, 0.3]);
    match rng.below(7) {
        0 => VolatileCheck {
            sql: format!(
                "SELECT count(*) FROM (SELECT {key}, random() AS x FROM {t}) a \
                 JOIN (SELECT {key}, random() AS x FROM {t}) b ON a.{key} = b.{key} AND a.x = b.x"
            ),
            expect: Expect::Zero,
        },
        1 => VolatileCheck {
            sql: format!(
                "WITH c AS (SELECT {key}, uuid() AS x FROM {t}) \
                 SELECT count(*) FROM c a JOIN c b ON a.{key} = b.{key} AND a.x = b.x"
            ),
            expect: Expect::Zero,
        },
        2 => VolatileCheck {
            sql: format!("SELECT count(*) FROM {t} WHERE random() < {p}"),
            expect: Expect::Binomial {
                whole: format!("SELECT count(*) FROM {t}"),
                p,
            },
        },
        3 => {
            let grouped = format!("(SELECT {key}, count(*) AS c FROM {t} GROUP BY {key}) g");
            VolatileCheck {
                sql: format!(
                    "SELECT count(*) FROM {grouped} \
                     JOIN (SELECT {key} FROM {u} WHERE random() < {p}) d ON g.{key} = d.{key}"
                ),
                expect: Expect::Binomial {
                    whole: format!(
                        "SELECT count(*) FROM {grouped} JOIN {u} d ON g.{key} = d.{key}"
                    ),
                    p,
                },
            }
        }
        5 => VolatileCheck {
            // One sample for every task: each sampled key joins all its
            // rows (a build side every task drew again would not).
            sql: format!(
                "SELECT count(*) FROM (SELECT d.{key}, count(*) AS c FROM {t} f \
                 JOIN (SELECT DISTINCT {key} FROM {u} WHERE random() < {p}) d \
                 ON f.{key} = d.{key} GROUP BY d.{key}) x \
                 JOIN (SELECT {key}, count(*) AS n FROM {t} GROUP BY {key}) y \
                 ON x.{key} = y.{key} WHERE x.c <> y.n"
            ),
            expect: Expect::Zero,
        },
        4 => VolatileCheck {
            sql: format!(
                "SELECT count(*) - count(DISTINCT x) FROM \
                 (SELECT uuid() AS x FROM {t} a JOIN {u} b ON a.{key} = b.{key})"
            ),
            expect: Expect::Zero,
        },
        _ => VolatileCheck {
            sql: format!(
                "SELECT count(*) FROM {t} a WHERE a.{key} IN \
                 (SELECT b.{key} FROM {u} b WHERE random() < {p})"
            ),
            expect: Expect::Binomial {
                whole: format!(
                    "SELECT count(*) FROM {t} a WHERE a.{key} IN (SELECT b.{key} FROM {u} b)"
                ),
                p: -1.0,
            },
        },
    }
}

impl Expect {
    /// Whether `count` keeps the invariant, `whole` the count without the
    /// sample (for a binomial one). A negative `p` only bounds the count
    /// by `whole` (a semi join's sample keeps a key's rows together).
    pub fn holds(&self, count: i64, whole: Option<i64>) -> bool {
        match self {
            Expect::Zero => count == 0,
            Expect::Binomial { p, .. } => {
                let Some(n) = whole else {
                    return false;
                };
                if *p < 0.0 {
                    return (0..=n).contains(&count);
                }
                let (n, k) = (n as f64, count as f64);
                let sigma = (n * p * (1.0 - p)).sqrt();
                (k - n * p).abs() <= 6.0 * sigma + 1.0
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_accept_one_sample_and_refuse_two() {
        let half = Expect::Binomial {
            whole: String::new(),
            p: 0.5,
        };
        assert!(half.holds(1000, Some(2000)) && half.holds(1050, Some(2000)));
        // A filter evaluated twice keeps about a quarter.
        assert!(!half.holds(500, Some(2000)));
        assert!(Expect::Zero.holds(0, None) && !Expect::Zero.holds(3, None));
        let tables = ["t0".to_string(), "t1".to_string()];
        let sqls: Vec<String> = (0..50)
            .map(|s| check(&mut Rng::new(s), &tables).sql)
            .collect();
        assert!(sqls.iter().any(|s| s.contains("uuid()")));
        assert!(sqls.iter().any(|s| s.contains("GROUP BY")));
    }
}
