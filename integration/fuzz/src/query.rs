//! A generated query as parts the reducer can drop one at a time: FROM
//! items joined in order, WHERE conjuncts, select items, grouping, set
//! operations, ORDER BY and LIMIT. Expressions are SQL text with the set
//! of FROM aliases they read, which is all dropping needs to know.

/// An expression's text and the FROM aliases (`a0`, `a1`, … as bits) it
/// reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    pub sql: String,
    pub reads: u64,
}

impl Piece {
    pub fn new(sql: impl Into<String>, reads: u64) -> Self {
        Self {
            sql: sql.into(),
            reads,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    /// `FROM a, b WHERE …`: the conditions go to WHERE.
    Comma,
    Inner,
    Left,
    Right,
    Full,
    /// `LEFT SEMI JOIN` / `LEFT ANTI JOIN`: the joined alias is not
    /// visible past its ON.
    LeftSemi,
    LeftAnti,
}

impl JoinKind {
    fn sql(self) -> &'static str {
        match self {
            JoinKind::Comma => ",",
            JoinKind::Inner => "JOIN",
            JoinKind::Left => "LEFT JOIN",
            JoinKind::Right => "RIGHT JOIN",
            JoinKind::Full => "FULL JOIN",
            JoinKind::LeftSemi => "LEFT SEMI JOIN",
            JoinKind::LeftAnti => "LEFT ANTI JOIN",
        }
    }

    /// Whether the joined alias's columns can be read after the join.
    pub fn shows_right(self) -> bool {
        !matches!(self, JoinKind::LeftSemi | JoinKind::LeftAnti)
    }
}

/// One FROM item: a table, the shared CTE, or a derived table, under alias
/// `a<alias>`, joined to the items before it.
#[derive(Debug, Clone, PartialEq)]
pub struct FromItem {
    pub source: String,
    pub alias: usize,
    pub join: JoinKind,
    pub on: Vec<Piece>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Grouping {
    None,
    By(Vec<Piece>),
    /// `GROUPING SETS ((a, b), (a), ())`-like sets over `keys`.
    Sets(Vec<Piece>, Vec<Vec<usize>>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Select {
    pub distinct: bool,
    pub items: Vec<Piece>,
    pub from: Vec<FromItem>,
    pub filters: Vec<Piece>,
    pub grouping: Grouping,
    pub having: Vec<Piece>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetOp {
    Union,
    UnionAll,
    Intersect,
    Except,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// `WITH c AS (<sql>)`, read by FROM items whose source is `c`.
    pub cte: Option<String>,
    pub select: Select,
    pub set_op: Option<(SetOp, Select)>,
    /// ORDER BY every output column (a total order, so a LIMIT takes the
    /// same rows in both engines).
    pub ordered: bool,
    pub limit: Option<usize>,
}

impl Select {
    pub fn sql(&self) -> String {
        let items: Vec<String> = self
            .items
            .iter()
            .enumerate()
            .map(|(i, item)| format!("{} AS c{i}", item.sql))
            .collect();
        let mut sql = format!(
            "SELECT {}{}",
            if self.distinct { "DISTINCT " } else { "" },
            items.join(", ")
        );
        let mut filters: Vec<&str> = self.filters.iter().map(|p| p.sql.as_str()).collect();
        for (i, item) in self.from.iter().enumerate() {
            let source = format!("{} a{}", item.source, item.alias);
            if i == 0 {
                sql += &format!(" FROM {source}");
                continue;
            }
            if item.join == JoinKind::Comma {
                sql += &format!(", {source}");
                filters.extend(item.on.iter().map(|p| p.sql.as_str()));
                continue;
            }
            let on: Vec<&str> = item.on.iter().map(|p| p.sql.as_str()).collect();
            let on = if on.is_empty() {
                "true".to_string()
            } else {
                on.join(" AND ")
            };
            sql += &format!(" {} {source} ON {on}", item.join.sql());
        }
        if !filters.is_empty() {
            sql += &format!(" WHERE {}", filters.join(" AND "));
        }
        match &self.grouping {
            Grouping::None => {}
            Grouping::By(keys) => {
                let keys: Vec<&str> = keys.iter().map(|k| k.sql.as_str()).collect();
                sql += &format!(" GROUP BY {}", keys.join(", "));
            }
            Grouping::Sets(keys, sets) => {
                let sets: Vec<String> = sets
                    .iter()
                    .map(|set| {
                        let keys: Vec<&str> = set.iter().map(|i| keys[*i].sql.as_str()).collect();
                        format!("({})", keys.join(", "))
                    })
                    .collect();
                sql += &format!(" GROUP BY GROUPING SETS ({})", sets.join(", "));
            }
        }
        if !self.having.is_empty() {
            let having: Vec<&str> = self.having.iter().map(|p| p.sql.as_str()).collect();
            sql += &format!(" HAVING {}", having.join(" AND "));
        }
        sql
    }

    /// Whether a WHERE predicate over its rows can be split (TLP) or
    /// counted (NoREC): no grouping, DISTINCT or window over the rows.
    pub fn is_plain(&self) -> bool {
        !self.distinct
            && self.grouping == Grouping::None
            && self.having.is_empty()
            && self
                .items
                .iter()
                .all(|item| !item.sql.contains(" OVER ") && !is_aggregate(&item.sql))
    }
}

/// Whether an item computes an aggregate (the generator's aggregates all
/// start with one of these calls).
pub fn is_aggregate(sql: &str) -> bool {
    [
        "count(",
        "sum(",
        "min(",
        "max(",
        "avg(",
        "bool_and(",
        "bool_or(",
    ]
    .iter()
    .any(|f| sql.starts_with(f))
}

impl Query {
    pub fn sql(&self) -> String {
        let mut sql = String::new();
        if let Some(cte) = &self.cte {
            sql += &format!("WITH c AS ({cte}) ");
        }
        sql += &self.select.sql();
        if let Some((op, right)) = &self.set_op {
            let op = match op {
                SetOp::Union => "UNION",
                SetOp::UnionAll => "UNION ALL",
                SetOp::Intersect => "INTERSECT",
                SetOp::Except => "EXCEPT",
            };
            sql += &format!(" {op} {}", right.sql());
        }
        if self.ordered {
            let columns: Vec<String> = (1..=self.select.items.len())
                .map(|i| i.to_string())
                .collect();
            sql += &format!(" ORDER BY {}", columns.join(", "));
        }
        if let Some(limit) = self.limit {
            sql += &format!(" LIMIT {limit}");
        }
        sql
    }

    /// Whether the rows come in an order both engines must keep.
    pub fn is_ordered(&self) -> bool {
        self.ordered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_renders_every_part() {
        let select = Select {
            distinct: false,
            items: vec![Piece::new("a0.k0", 1), Piece::new("count(*)", 0)],
            from: vec![
                FromItem {
                    source: "t0".into(),
                    alias: 0,
                    join: JoinKind::Inner,
                    on: vec![],
                },
                FromItem {
                    source: "c".into(),
                    alias: 1,
                    join: JoinKind::Comma,
                    on: vec![Piece::new("a0.k0 = a1.k2", 3)],
                },
                FromItem {
                    source: "t1".into(),
                    alias: 2,
                    join: JoinKind::LeftAnti,
                    on: vec![],
                },
            ],
            filters: vec![Piece::new("a0.k1 > 3", 1)],
            grouping: Grouping::By(vec![Piece::new("a0.k0", 1)]),
            having: vec![Piece::new("count(*) > 1", 0)],
        };
        let query = Query {
            cte: Some("SELECT * FROM t2".into()),
            select,
            set_op: None,
            ordered: true,
            limit: Some(3),
        };
        assert_eq!(
            query.sql(),
            "WITH c AS (SELECT * FROM t2) SELECT a0.k0 AS c0, count(*) AS c1 FROM t0 a0, c a1 \
             LEFT ANTI JOIN t1 a2 ON true WHERE a0.k1 > 3 AND a0.k0 = a1.k2 GROUP BY a0.k0 \
             HAVING count(*) > 1 ORDER BY 1, 2 LIMIT 3"
        );
        assert!(!query.select.is_plain());
    }
}
