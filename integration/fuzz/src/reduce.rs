//! Smaller versions of a failing query: each drops one part (a FROM item
//! no other part reads, a join condition, a filter, an item, the grouping
//! sets, DISTINCT, the set operation, ORDER BY and LIMIT, the CTE) or
//! makes a join inner. The fuzzer keeps the first that still fails and
//! asks again until none does; then halves the tables' rows the same way.

use crate::query::{Grouping, JoinKind, Query, Select};

/// Every query one step smaller than `query`.
pub fn smaller(query: &Query) -> Vec<Query> {
    let mut out = vec![];
    let mut with = |change: &dyn Fn(&mut Query)| {
        let mut q = query.clone();
        change(&mut q);
        if q != *query {
            out.push(q);
        }
    };
    with(&|q| q.limit = None);
    with(&|q| q.ordered = q.limit.is_some());
    with(&|q| q.set_op = None);
    if let Some((_, right)) = &query.set_op {
        let right = right.clone();
        with(&move |q| {
            q.select = right.clone();
            q.set_op = None
        });
    }
    if !reads_cte(&query.select) && query.set_op.as_ref().is_none_or(|(_, s)| !reads_cte(s)) {
        with(&|q| q.cte = None);
    }
    for select in smaller_selects(&query.select) {
        with(&|q| q.select = select.clone());
    }
    out
}

fn reads_cte(select: &Select) -> bool {
    select.from.iter().any(|f| f.source == "c")
}

fn smaller_selects(select: &Select) -> Vec<Select> {
    let mut out = vec![];
    let mut with = |change: &dyn Fn(&mut Select)| {
        let mut s = select.clone();
        change(&mut s);
        if s != *select {
            out.push(s);
        }
    };
    // Whole FROM items first: they shrink the most.
    for (i, item) in select.from.iter().enumerate().skip(1) {
        let bit = 1u64 << item.alias;
        let read_elsewhere = select
            .items
            .iter()
            .chain(&select.filters)
            .chain(&select.having)
            .chain(grouping_keys(&select.grouping))
            .chain(
                select
                    .from
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .flat_map(|(_, f)| &f.on),
            )
            .any(|p| p.reads & bit != 0);
        if !read_elsewhere {
            with(&|s| {
                s.from.remove(i);
            });
        }
    }
    for i in 0..select.filters.len() {
        with(&|s| {
            s.filters.remove(i);
        });
    }
    for i in 0..select.from.len() {
        for k in 0..select.from[i].on.len() {
            with(&|s| {
                s.from[i].on.remove(k);
            });
        }
        if !matches!(select.from[i].join, JoinKind::Inner | JoinKind::Comma) {
            with(&|s| s.from[i].join = JoinKind::Inner);
        }
        if select.from[i].source.starts_with('(') {
            with(&|s| {
                let table = s.from[i]
                    .source
                    .split(" FROM ")
                    .nth(1)
                    .and_then(|rest| rest.split(' ').next())
                    .unwrap_or("t0")
                    .to_string();
                s.from[i].source = table;
            });
        }
    }
    if select.items.len() > 1 {
        for i in 0..select.items.len() {
            with(&|s| {
                s.items.remove(i);
            });
        }
    }
    for i in 0..select.having.len() {
        with(&|s| {
            s.having.remove(i);
        });
    }
    match &select.grouping {
        Grouping::Sets(keys, _) => {
            let keys = keys.clone();
            with(&move |s| s.grouping = Grouping::By(keys.clone()));
        }
        Grouping::By(keys) if keys.len() > 1 => {
            for i in 0..keys.len() {
                with(&|s| {
                    if let Grouping::By(keys) = &mut s.grouping {
                        let key = keys.remove(i);
                        s.items.retain(|item| *item != key);
                    }
                });
            }
        }
        _ => {}
    }
    with(&|s| s.distinct = false);
    out
}

fn grouping_keys(grouping: &Grouping) -> &[crate::query::Piece] {
    match grouping {
        Grouping::None => &[],
        Grouping::By(keys) | Grouping::Sets(keys, _) => keys,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate;
    use crate::rng::Rng;

    #[test]
    fn every_smaller_query_is_smaller_and_a_fixpoint_is_reached() {
        let tables: Vec<String> = (0..4).map(|i| format!("t{i}")).collect();
        for seed in 0..100 {
            let mut query = generate::query(&mut Rng::new(seed), &tables);
            // Taking the first smaller query every time ends.
            for _ in 0..200 {
                let Some(next) = smaller(&query).into_iter().next() else {
                    break;
                };
                assert!(next.sql().len() <= query.sql().len() + 10, "{}", next.sql());
                query = next;
            }
            assert!(smaller(&query).is_empty(), "{}", query.sql());
            assert!(query.select.from.len() <= 3, "{}", query.sql());
        }
    }
}
