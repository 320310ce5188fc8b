//! The checks a generated query goes through. Differential: Squadron's
//! answer in a mode against DataFusion's. Metamorphic, after SQLancer, so
//! that bugs DataFusion shares show too: TLP (the rows of a query are the
//! rows WHERE p, plus WHERE NOT p, plus WHERE p IS NULL) and NoREC (the
//! count of rows a filter keeps is the count of rows the predicate, as a
//! column, says true for).

use crate::compare::{compare, contained, null_before_a_value, Verdict};
use crate::engines::{Engines, Outcome};
use crate::query::{JoinKind, Piece, Query};

/// One check of one query, as the reducer replays it.
#[derive(Debug, Clone)]
pub enum Check {
    /// Squadron in mode number `mode` answers as DataFusion does.
    Differential { mode: usize },
    /// In mode number `mode`, splitting on `predicate` keeps every row.
    Tlp { mode: usize, predicate: Piece },
    /// In mode number `mode`, the filter's count is the predicate's.
    Norec { mode: usize },
}

impl Check {
    pub fn mode(&self) -> usize {
        match self {
            Check::Differential { mode } | Check::Tlp { mode, .. } | Check::Norec { mode } => *mode,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Check::Differential { .. } => "differential",
            Check::Tlp { .. } => "TLP",
            Check::Norec { .. } => "NoREC",
        }
    }

    /// Whether the check applies to `query`.
    pub fn applies(&self, query: &Query) -> bool {
        match self {
            Check::Differential { .. } => true,
            // The reducer may drop a FROM item the predicate reads.
            Check::Tlp { predicate, .. } => {
                let shown = crate::generate::visible(&query.select.from)
                    .iter()
                    .fold(0u64, |set, alias| set | 1 << alias);
                is_partitionable(query) && predicate.reads & !shown == 0
            }
            Check::Norec { .. } => is_countable(query),
        }
    }

    /// The verdict on `query`, or `None` when the check cannot tell (the
    /// reference statement failed). `known` is DataFusion's answer when
    /// the caller has it already.
    pub async fn run(
        &self,
        engines: &mut Engines,
        query: &Query,
        known: Option<&Outcome>,
    ) -> Option<Verdict> {
        match self {
            Check::Differential { mode } => {
                let sql = query.sql();
                let expected = match known {
                    Some(known) => known.clone(),
                    None => engines.oracle(&sql).await,
                };
                if matches!(expected, Outcome::Error(_)) {
                    return None;
                }
                let got = engines.squadron(*mode, &sql).await;
                let verdict = compare(&expected, &got, query.is_ordered());
                let verdict =
                    unless_datafusion_misorders_a_limit(engines, &sql, &expected, &got, verdict)
                        .await;
                Some(unless_datafusion_fails_too(engines, *mode, &sql, verdict, &got).await)
            }
            Check::Tlp { mode, predicate } => {
                let whole = engines.squadron(*mode, &query.sql()).await;
                if matches!(whole, Outcome::Error(_)) {
                    return None;
                }
                let parts = tlp_parts(query, predicate);
                let got = engines.squadron(*mode, &parts).await;
                let verdict = compare(&whole, &got, false);
                Some(unless_datafusion_fails_too(engines, *mode, &parts, verdict, &got).await)
            }
            Check::Norec { mode } => {
                let (filtered, counted) = norec_pair(query);
                let expected = engines.squadron(*mode, &filtered).await;
                if matches!(expected, Outcome::Error(_)) {
                    return None;
                }
                let got = engines.squadron(*mode, &counted).await;
                let verdict = compare(&expected, &got, false);
                Some(unless_datafusion_fails_too(engines, *mode, &counted, verdict, &got).await)
            }
        }
    }
}

/// `verdict` on Squadron's answer `got` to `sql` in mode number `mode`,
/// tolerated where Squadron failed and single-node DataFusion, planning
/// with the mode's DataFusion settings, fails on `sql` too: a plan
/// DataFusion itself cannot run (its bug, shown, not Squadron's). The
/// metamorphic checks' second statements meet such bugs as often as the
/// generated ones (seed 51001, query 691: DataFusion 55's projection
/// pushdown refused a TLP part over two columns named `d`).
pub async fn unless_datafusion_fails_too(
    engines: &mut Engines,
    mode: usize,
    sql: &str,
    verdict: Verdict,
    got: &Outcome,
) -> Verdict {
    let (Verdict::Differs(why), Outcome::Error(_)) = (&verdict, got) else {
        return verdict;
    };
    let datafusion = match engines.oracle_under_mode(mode, sql).await {
        Some(outcome) => outcome,
        None => engines.oracle(sql).await,
    };
    match datafusion {
        Outcome::Error(e) => Verdict::Tolerated(format!(
            "{why}; single-node DataFusion fails too under the mode's settings: {e}"
        )),
        Outcome::Rows(_) => verdict,
    }
}

/// `verdict` on Squadron's answer `got` to the ordered, limited `sql`,
/// tolerated where DataFusion's own answer `expected` puts a NULL before
/// a value of its ORDER BY (its bug over grouping sets of equal columns,
/// seed 82001 query 1383), so that its LIMIT kept other rows than the
/// first ones: ours are then checked as far as the oracle can tell, in
/// order, as many rows, and each a row of the answer without LIMIT.
pub async fn unless_datafusion_misorders_a_limit(
    engines: &mut Engines,
    sql: &str,
    expected: &Outcome,
    got: &Outcome,
    verdict: Verdict,
) -> Verdict {
    let (Verdict::Differs(why), Outcome::Rows(theirs), Outcome::Rows(ours)) =
        (&verdict, expected, got)
    else {
        return verdict;
    };
    let Some(unlimited) = without_limit(sql) else {
        return verdict;
    };
    if null_before_a_value(theirs).is_none()
        || null_before_a_value(ours).is_some()
        || theirs.len() != ours.len()
    {
        return verdict;
    }
    match engines.oracle(&unlimited).await {
        Outcome::Rows(all) if contained(ours, &all) => Verdict::Tolerated(format!(
            "{why}; DataFusion's own answer puts a NULL before a value of its ORDER BY, \
             so its LIMIT kept other rows; ours are in order and among the unlimited answer's"
        )),
        _ => verdict,
    }
}

/// `sql` without its final `LIMIT n`, if it ends with one.
pub fn without_limit(sql: &str) -> Option<String> {
    let (rest, count) = sql.trim_end().rsplit_once(" LIMIT ")?;
    let is_count = !count.is_empty() && count.chars().all(|c| c.is_ascii_digit());
    is_count.then(|| rest.to_string())
}

/// A plain query (no grouping, DISTINCT, window, set operation or LIMIT)
/// whose WHERE can take one more predicate.
fn is_partitionable(query: &Query) -> bool {
    query.set_op.is_none() && query.limit.is_none() && query.select.is_plain()
}

/// A plain query whose whole filter can be evaluated as a column: no
/// subquery in it (a CASE cannot hold one) and no comma join (its
/// equalities are in WHERE, and without them the rows are a cross
/// product).
fn is_countable(query: &Query) -> bool {
    is_partitionable(query)
        && !query.select.filters.is_empty()
        && query
            .select
            .filters
            .iter()
            .all(|f| !f.sql.contains("SELECT"))
        && query.select.from.iter().all(|f| f.join != JoinKind::Comma)
}

/// The query's rows as three disjoint parts by `predicate`, UNION ALL.
pub fn tlp_parts(query: &Query, predicate: &Piece) -> String {
    let mut plain = query.clone();
    plain.ordered = false;
    let part = |condition: String| {
        let mut part = plain.clone();
        part.select
            .filters
            .push(Piece::new(condition, predicate.reads));
        part.select.sql()
    };
    let p = &predicate.sql;
    let cte = plain
        .cte
        .as_ref()
        .map(|c| format!("WITH c AS ({c}) "))
        .unwrap_or_default();
    format!(
        "{cte}{} UNION ALL {} UNION ALL {}",
        part(format!("({p})")),
        part(format!("NOT ({p})")),
        part(format!("({p}) IS NULL"))
    )
}

/// `SELECT count(*) … WHERE p` and the same count as a sum of `p`.
pub fn norec_pair(query: &Query) -> (String, String) {
    let mut counted = query.clone();
    counted.ordered = false;
    let filter = counted
        .select
        .filters
        .drain(..)
        .map(|f| format!("({})", f.sql))
        .collect::<Vec<_>>()
        .join(" AND ");
    counted.select.items = vec![Piece::new(
        format!("coalesce(sum(CASE WHEN {filter} THEN 1 ELSE 0 END), 0)"),
        0,
    )];
    let mut filtered = query.clone();
    filtered.ordered = false;
    filtered.select.items = vec![Piece::new("count(*)", 0)];
    (filtered.sql(), counted.sql())
}

#[cfg(test)]
mod tests {
    use super::without_limit;

    #[test]
    fn a_final_limit_is_dropped_and_nothing_else() {
        assert_eq!(
            without_limit("SELECT a FROM t ORDER BY 1 LIMIT 4").as_deref(),
            Some("SELECT a FROM t ORDER BY 1")
        );
        assert_eq!(without_limit("SELECT a FROM t ORDER BY 1"), None);
        assert_eq!(without_limit("SELECT (SELECT 1 LIMIT 1) FROM t"), None);
        assert_eq!(without_limit("SELECT a FROM t LIMIT "), None);
    }
}
