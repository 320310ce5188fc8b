//! Random queries over the generated tables, with the features the
//! rewrites key on: joins of 1–6 items of every kind (inner, outer, semi,
//! anti, comma joins with the equalities in WHERE), multi-column keys and
//! keys equal to two columns of one table, non-equi conditions, filters,
//! IN / EXISTS / scalar subqueries, aggregates with GROUPING SETS,
//! DISTINCT, windows, a CTE read twice, derived tables, set operations,
//! ORDER BY with LIMIT.
//!
//! Only deterministic answers: floats are compared, grouped, minimised
//! and maximised but never summed (the sum's rounding depends on the
//! order rows arrive in), windows are ranks or aggregates over whole
//! peer groups, and a LIMIT comes after an ORDER BY of every column.

use crate::data::{Kind, COLUMNS, STRINGS};
use crate::query::{FromItem, Grouping, JoinKind, Piece, Query, Select, SetOp};
use crate::rng::Rng;

/// What one query may read: the tables, and the CTE once it exists.
pub struct Generator<'a> {
    rng: &'a mut Rng,
    tables: &'a [String],
    cte: bool,
    /// Subqueries nest at most this deep.
    depth: usize,
}

pub fn query(rng: &mut Rng, tables: &[String]) -> Query {
    let mut generator = Generator {
        rng,
        tables,
        cte: false,
        depth: 0,
    };
    generator.query()
}

impl Generator<'_> {
    fn query(&mut self) -> Query {
        let cte = self.rng.chance(20).then(|| {
            let table = self.rng.pick(self.tables).clone();
            let filter = self.predicate(&[0], 1);
            format!("SELECT a0.* FROM {table} a0 WHERE {}", filter.sql)
        });
        self.cte = cte.is_some();
        let set_op = self.rng.chance(12);
        let select = if set_op {
            self.simple_select()
        } else {
            self.select()
        };
        let set_op = set_op.then(|| {
            let op = *self.rng.pick(&[
                SetOp::Union,
                SetOp::UnionAll,
                SetOp::Intersect,
                SetOp::Except,
            ]);
            let mut right = self.simple_select();
            // The same column kinds on both sides.
            right.items = select
                .items
                .iter()
                .map(|item| {
                    let kind = kind_of(&item.sql);
                    let visible = visible(&right.from);
                    self.column(&visible, kind)
                })
                .collect();
            (op, right)
        });
        let limit = self.rng.chance(15).then(|| self.rng.below(20));
        Query {
            cte,
            select,
            set_op,
            ordered: limit.is_some() || self.rng.chance(20),
            limit,
        }
    }

    /// One or two FROM items, filters and plain columns: a side of a set
    /// operation.
    fn simple_select(&mut self) -> Select {
        let count = 1 + self.rng.below(2);
        let from = self.from(count);
        let visible = visible(&from);
        let items = (0..1 + self.rng.below(3))
            .map(|_| {
                let kind = *self
                    .rng
                    .pick(&[Kind::BigInt, Kind::Int, Kind::Text, Kind::Date]);
                self.column(&visible, kind)
            })
            .collect();
        let filters = self.filters(&visible);
        Select {
            distinct: false,
            items,
            from,
            filters,
            grouping: Grouping::None,
            having: vec![],
        }
    }

    fn select(&mut self) -> Select {
        let count = *self.rng.pick(&[1, 2, 2, 3, 3, 3, 4, 4, 5, 6]);
        let mut from = self.from(count);
        if self.cte && from.iter().filter(|f| f.source == "c").count() < 2 {
            // The CTE read twice: the case shared shuffles exist for.
            if from.len() < 2 {
                from.extend(self.from(2).into_iter().skip(1));
            }
            for item in from.iter_mut().take(2) {
                item.source = "c".into();
            }
        }
        let visible = visible(&from);
        let filters = self.filters(&visible);
        let mut select = Select {
            distinct: false,
            items: vec![],
            from,
            filters,
            grouping: Grouping::None,
            having: vec![],
        };
        match self.rng.below(100) {
            0..=44 => {
                let count = 1 + self.rng.below(4);
                select.items = self.values(&visible, count);
            }
            45..=74 => self.grouped(&mut select, &visible),
            75..=84 => {
                let count = 1 + self.rng.below(2);
                select.items = self.values(&visible, count);
                select.items.push(self.window(&visible));
            }
            _ => {
                select.distinct = true;
                let count = 1 + self.rng.below(3);
                select.items = self.values(&visible, count);
            }
        }
        select
    }

    fn grouped(&mut self, select: &mut Select, visible: &[usize]) {
        let keys: Vec<Piece> = (0..1 + self.rng.below(2))
            .map(|_| {
                let kind = *self
                    .rng
                    .pick(&[Kind::BigInt, Kind::Int, Kind::Text, Kind::Bool]);
                self.column(visible, kind)
            })
            .collect();
        select.items = keys.clone();
        for _ in 0..1 + self.rng.below(3) {
            let aggregate = self.aggregate(visible);
            select.items.push(aggregate);
        }
        select.grouping = if keys.len() == 2 && self.rng.chance(30) {
            let sets = match self.rng.below(3) {
                0 => vec![vec![0, 1], vec![0], vec![]],
                1 => vec![vec![0], vec![1]],
                _ => vec![vec![0, 1], vec![1], vec![0], vec![]],
            };
            Grouping::Sets(keys, sets)
        } else {
            Grouping::By(keys)
        };
        if self.rng.chance(20) {
            let having = match self.rng.below(2) {
                0 => Piece::new(format!("count(*) > {}", self.rng.below(3)), 0),
                _ => {
                    let column = self.column(visible, Kind::Int);
                    Piece::new(format!("min({}) IS NOT NULL", column.sql), column.reads)
                }
            };
            select.having.push(having);
        }
    }

    /// `count` FROM items; each joined to the ones before on equalities
    /// of their keys (two for one column, now and then), perhaps with a
    /// non-equi condition.
    fn from(&mut self, count: usize) -> Vec<FromItem> {
        let commas = count > 1 && self.rng.chance(20);
        let mut items: Vec<FromItem> = vec![];
        for alias in 0..count {
            let source = self.source();
            if alias == 0 {
                items.push(FromItem {
                    source,
                    alias,
                    join: JoinKind::Inner,
                    on: vec![],
                });
                continue;
            }
            let join = if commas {
                JoinKind::Comma
            } else {
                *self.rng.pick(&[
                    JoinKind::Inner,
                    JoinKind::Inner,
                    JoinKind::Inner,
                    JoinKind::Inner,
                    JoinKind::Left,
                    JoinKind::Left,
                    JoinKind::Right,
                    JoinKind::Full,
                    JoinKind::LeftSemi,
                    JoinKind::LeftAnti,
                ])
            };
            let before = visible(&items);
            let on = self.join_conditions(&before, alias);
            items.push(FromItem {
                source,
                alias,
                join,
                on,
            });
        }
        items
    }

    fn source(&mut self) -> String {
        let table = self.rng.pick(self.tables).clone();
        match self.rng.below(100) {
            0..=14 if self.cte => "c".into(),
            15..=24 => {
                let filter = self.predicate(&[0], 1);
                format!("(SELECT a0.* FROM {table} a0 WHERE {})", filter.sql)
            }
            _ => table,
        }
    }

    fn join_conditions(&mut self, before: &[usize], alias: usize) -> Vec<Piece> {
        let mut on = vec![];
        let keys = [
            ("k0", Kind::BigInt),
            ("k2", Kind::BigInt),
            ("k1", Kind::Int),
        ];
        for _ in 0..*self.rng.pick(&[1, 1, 1, 2]) {
            let other = *self.rng.pick(before);
            let (mine, kind) = *self.rng.pick(&keys);
            // Mostly a key of the same type; now and then one of another
            // (a cast in the key).
            let theirs = if self.rng.chance(85) {
                let same: Vec<&str> = keys
                    .iter()
                    .filter(|(_, k)| *k == kind)
                    .map(|(name, _)| *name)
                    .collect();
                *self.rng.pick(&same)
            } else {
                self.rng.pick(&keys).0
            };
            on.push(Piece::new(
                format!("a{alias}.{mine} = a{other}.{theirs}"),
                1 << alias | 1 << other,
            ));
            // The same column equal to a second alias's key: a class of
            // equal columns holding two columns of one table.
            if before.len() > 1 && self.rng.chance(25) {
                let third = *self.rng.pick(before);
                let (key, _) = *self.rng.pick(&keys[..2]);
                if kind == Kind::BigInt {
                    on.push(Piece::new(
                        format!("a{alias}.{mine} = a{third}.{key}"),
                        1 << alias | 1 << third,
                    ));
                }
            }
        }
        if self.rng.chance(10) {
            let other = *self.rng.pick(before);
            let op = *self.rng.pick(&["<", "<=", ">", "<>"]);
            let (column, _) = *self.rng.pick(&[("k1", ()), ("v", ()), ("d", ())]);
            on.push(Piece::new(
                format!("a{alias}.{column} {op} a{other}.{column}"),
                1 << alias | 1 << other,
            ));
        }
        if self.rng.chance(15) {
            on.push(self.predicate(&[alias], 1));
        }
        on
    }

    fn filters(&mut self, visible: &[usize]) -> Vec<Piece> {
        let mut filters = vec![];
        for _ in 0..*self.rng.pick(&[0, 1, 1, 2, 3]) {
            let filter = if self.depth < 1 && self.rng.chance(20) {
                self.subquery_predicate(visible)
            } else {
                self.predicate(visible, 2)
            };
            filters.push(filter);
        }
        filters
    }

    /// A column of `kind` (any numeric one for `Int`) of a visible alias.
    fn column(&mut self, visible: &[usize], kind: Kind) -> Piece {
        let alias = *self.rng.pick(visible);
        let names: Vec<&str> = COLUMNS
            .iter()
            .filter(|(_, k)| *k == kind)
            .map(|(name, _)| *name)
            .collect();
        let name = self.rng.pick(&names);
        Piece::new(format!("a{alias}.{name}"), 1 << alias)
    }

    fn literal(&mut self, kind: Kind) -> String {
        match kind {
            Kind::BigInt => {
                let v = *self
                    .rng
                    .pick(&[0, 1, 2, 3, 10, 299, -1, i64::MIN, i64::MAX]);
                if v == i64::MIN {
                    // -9223372036854775808 parses as a negated literal
                    // that overflows.
                    "CAST(-9223372036854775808 AS BIGINT)".into()
                } else {
                    v.to_string()
                }
            }
            Kind::Int => {
                let v = *self.rng.pick(&[0, 1, 2, 4, 29, -1, i32::MIN, i32::MAX]);
                format!("CAST({v} AS INT)")
            }
            Kind::Decimal => {
                let v = *self
                    .rng
                    .pick(&["0", "12.5", "-100.25", "9999999999.99", "1000"]);
                format!("CAST({v} AS DECIMAL(12, 2))")
            }
            Kind::Float => self.rng.pick(&["0.0", "1.25", "-3.5", "100.0"]).to_string(),
            Kind::Text => format!("'{}'", self.rng.pick(STRINGS)),
            Kind::Date => {
                let date =
                    *self
                        .rng
                        .pick(&["2019-04-15", "2020-01-01", "1970-01-01", "2021-06-30"]);
                format!("DATE '{date}'")
            }
            Kind::Bool => self.rng.pick(&["true", "false"]).to_string(),
        }
    }

    /// A predicate over the visible aliases, nested `depth` deep at most.
    fn predicate(&mut self, visible: &[usize], depth: usize) -> Piece {
        if depth > 0 && self.rng.chance(25) {
            let a = self.predicate(visible, depth - 1);
            let b = self.predicate(visible, depth - 1);
            let reads = a.reads | b.reads;
            return match self.rng.below(3) {
                0 => Piece::new(format!("({} AND {})", a.sql, b.sql), reads),
                1 => Piece::new(format!("({} OR {})", a.sql, b.sql), reads),
                _ => Piece::new(format!("NOT ({})", a.sql), a.reads),
            };
        }
        let kind = *self.rng.pick(&[
            Kind::BigInt,
            Kind::Int,
            Kind::Decimal,
            Kind::Float,
            Kind::Text,
            Kind::Date,
            Kind::Bool,
        ]);
        let column = self.column(visible, kind);
        let c = &column.sql;
        let sql = match (kind, self.rng.below(6)) {
            (_, 0) => format!(
                "{c} IS {}NULL",
                if self.rng.chance(50) { "NOT " } else { "" }
            ),
            (Kind::Bool, _) => match self.rng.below(2) {
                0 => c.clone(),
                _ => format!("NOT {c}"),
            },
            (Kind::Text, 1) => {
                let pattern = *self.rng.pick(&[
                    "%a%",
                    "a%",
                    "%b",
                    "%a%b%",
                    "%é%",
                    "日%",
                    "%special%requests%",
                    "_b%",
                ]);
                let not = if self.rng.chance(30) { "NOT " } else { "" };
                format!("{c} {not}LIKE '{pattern}'")
            }
            (Kind::BigInt | Kind::Int, 1) => {
                let list: Vec<String> = (0..1 + self.rng.below(4))
                    .map(|_| self.literal(kind))
                    .collect();
                let not = if self.rng.chance(30) { "NOT " } else { "" };
                format!("{c} {not}IN ({})", list.join(", "))
            }
            (Kind::BigInt | Kind::Int | Kind::Decimal | Kind::Date, 2) => {
                let (low, high) = (self.literal(kind), self.literal(kind));
                // Mostly the bounds in order (reversed, the range is empty).
                let reversed = self.rng.chance(15);
                format!("{c} BETWEEN {low} AND {high}").replace(
                    &format!("{low} AND {high}"),
                    &if reversed || literal_order(&low, &high) {
                        format!("{low} AND {high}")
                    } else {
                        format!("{high} AND {low}")
                    },
                )
            }
            (_, 3) if visible.len() > 1 => {
                let other = self.column(visible, kind);
                let op = *self.rng.pick(&["=", "<>", "<", ">="]);
                return Piece::new(
                    format!("{c} {op} {}", other.sql),
                    column.reads | other.reads,
                );
            }
            _ => {
                // Equality to a literal is for the small domains (keys,
                // booleans); other kinds mostly compare by order.
                let op = match kind {
                    Kind::BigInt | Kind::Int | Kind::Bool => {
                        *self.rng.pick(&["=", "<>", "<", "<=", ">", ">="])
                    }
                    _ => *self.rng.pick(&["<>", "<", "<=", ">", ">="]),
                };
                format!("{c} {op} {}", self.literal(kind))
            }
        };
        Piece::new(sql, column.reads)
    }

    /// IN, NOT IN, EXISTS, NOT EXISTS or a scalar subquery over a table,
    /// correlated with a visible alias or not.
    fn subquery_predicate(&mut self, visible: &[usize]) -> Piece {
        self.depth += 1;
        let table = self.rng.pick(self.tables).clone();
        // The subquery's own alias is past any the outer query uses.
        let inner = 9;
        let filter = self.predicate(&[inner], 1);
        let outer = self.column(visible, Kind::BigInt);
        let key = *self.rng.pick(&["k0", "k2"]);
        let piece = match self.rng.below(5) {
            0 | 1 => {
                let not = if self.rng.below(2) == 0 { "NOT " } else { "" };
                Piece::new(
                    format!(
                        "{} {not}IN (SELECT a{inner}.{key} FROM {table} a{inner} WHERE {})",
                        outer.sql, filter.sql
                    ),
                    outer.reads,
                )
            }
            2 | 3 => {
                let not = if self.rng.below(2) == 0 { "NOT " } else { "" };
                Piece::new(
                    format!(
                        "{not}EXISTS (SELECT 1 FROM {table} a{inner} WHERE a{inner}.{key} = {} \
                         AND {})",
                        outer.sql, filter.sql
                    ),
                    outer.reads,
                )
            }
            _ => {
                let aggregate = *self.rng.pick(&["min", "max", "count"]);
                Piece::new(
                    format!(
                        "{} > (SELECT {aggregate}(a{inner}.{key}) FROM {table} a{inner} WHERE {})",
                        outer.sql, filter.sql
                    ),
                    outer.reads,
                )
            }
        };
        self.depth -= 1;
        piece
    }

    fn values(&mut self, visible: &[usize], count: usize) -> Vec<Piece> {
        (0..count).map(|_| self.value(visible)).collect()
    }

    fn value(&mut self, visible: &[usize]) -> Piece {
        let alias = *self.rng.pick(visible);
        let a = format!("a{alias}");
        let sql = match self.rng.below(14) {
            0 => format!("upper({a}.s)"),
            1 => format!("character_length({a}.s)"),
            2 => format!("substr({a}.s, 2, 2)"),
            3 => format!("{a}.v * 2"),
            4 => format!("{a}.v + {a}.v"),
            5 => format!("{a}.v * {a}.v"),
            6 => format!("coalesce({a}.k0, {a}.k2)"),
            7 => format!("CAST({a}.k1 AS BIGINT) + 7"),
            8 => {
                let when = self.predicate(&[alias], 0);
                format!("CASE WHEN {} THEN {a}.k1 ELSE -{a}.k1 END", when.sql)
            }
            _ => {
                let (name, _) = *self.rng.pick(COLUMNS);
                format!("{a}.{name}")
            }
        };
        Piece::new(sql, 1 << alias)
    }

    fn aggregate(&mut self, visible: &[usize]) -> Piece {
        let alias = *self.rng.pick(visible);
        let a = format!("a{alias}");
        let (name, _) = *self.rng.pick(COLUMNS);
        let sql = match self.rng.below(11) {
            0 => "count(*)".to_string(),
            1 => format!("count({a}.{name})"),
            2 => format!("count(DISTINCT {a}.{name})"),
            3 => format!("sum({a}.k1)"),
            4 => format!("sum({a}.v)"),
            5 => format!("sum({a}.k0)"),
            6 => extreme("min", &a, name),
            7 => extreme("max", &a, name),
            8 => format!("avg({a}.k1)"),
            9 => format!("bool_and({a}.b)"),
            _ => format!("sum({a}.v * {a}.v)"),
        };
        Piece::new(sql, 1 << alias)
    }

    fn window(&mut self, visible: &[usize]) -> Piece {
        let alias = *self.rng.pick(visible);
        let a = format!("a{alias}");
        let sql = match self.rng.below(5) {
            0 => format!("sum({a}.k1) OVER (PARTITION BY {a}.k0)"),
            1 => format!("count(*) OVER (PARTITION BY {a}.k0 ORDER BY {a}.k1)"),
            2 => format!("rank() OVER (PARTITION BY {a}.k2 ORDER BY {a}.s)"),
            3 => format!("dense_rank() OVER (ORDER BY {a}.k0)"),
            _ => format!("min({a}.v) OVER (PARTITION BY {a}.k1)"),
        };
        Piece::new(sql, 1 << alias)
    }
}

/// `min` or `max` of a column. NaN makes DataFusion's own `min`/`max` of a
/// DOUBLE depend on the plan's partitioning (docs/correctness.md), so the
/// oracle would have no one answer: NaN rows are left out with FILTER.
fn extreme(function: &str, alias: &str, name: &str) -> String {
    let kind = COLUMNS.iter().find(|(column, _)| *column == name);
    match kind {
        Some((_, Kind::Float)) => {
            format!("{function}({alias}.{name}) FILTER (WHERE NOT isnan({alias}.{name}))")
        }
        _ => format!("{function}({alias}.{name})"),
    }
}

/// A predicate over `visible` aliases (the one TLP splits a query on).
pub fn predicate(rng: &mut Rng, tables: &[String], visible: &[usize]) -> Piece {
    let mut generator = Generator {
        rng,
        tables,
        cte: false,
        depth: 0,
    };
    generator.predicate(visible, 2)
}

/// Whether `low <= high` for two literals `literal` made of one kind
/// (dates and numbers in their text; a text that does not parse as a
/// number compares as text).
fn literal_order(low: &str, high: &str) -> bool {
    let number = |text: &str| -> Option<f64> {
        let inner = text
            .trim_start_matches("CAST(")
            .split(" AS ")
            .next()
            .unwrap_or(text);
        inner.parse().ok()
    };
    match (number(low), number(high)) {
        (Some(a), Some(b)) => a <= b,
        _ => low <= high,
    }
}

/// The aliases whose columns can be read after `items` are joined.
pub fn visible(items: &[FromItem]) -> Vec<usize> {
    let mut shown = vec![];
    for item in items {
        if item.alias == 0 || item.join.shows_right() {
            shown.push(item.alias);
        }
    }
    shown
}

/// The kind of a plain column reference `aN.name`.
fn kind_of(sql: &str) -> Kind {
    let name = sql.rsplit('.').next().unwrap_or(sql);
    COLUMNS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, k)| *k)
        .unwrap_or(Kind::BigInt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_reproducible_and_varied() {
        let tables: Vec<String> = (0..4).map(|i| format!("t{i}")).collect();
        let texts: Vec<String> = (0..300)
            .map(|seed| query(&mut Rng::new(seed), &tables).sql())
            .collect();
        assert_eq!(texts[5], query(&mut Rng::new(5), &tables).sql());
        for feature in [
            " JOIN ",
            "LEFT JOIN",
            "FULL JOIN",
            "LEFT SEMI JOIN",
            "LEFT ANTI JOIN",
            "GROUP BY",
            "GROUPING SETS",
            "DISTINCT",
            " OVER (",
            "EXISTS",
            " IN (SELECT",
            "WITH c AS",
            "UNION",
            "INTERSECT",
            "EXCEPT",
            "LIMIT",
            "LIKE",
            "IS NULL",
        ] {
            assert!(texts.iter().any(|t| t.contains(feature)), "no {feature}");
        }
    }
}
