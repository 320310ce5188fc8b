//! A region of inner equi-joins, flattened: the plans it joins (leaves),
//! the column equalities between them, the other conditions, and the shape
//! the query wrote, so a new order can be built from the same pieces.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::common::tree_node::TreeNode;
use datafusion::common::NullEquality;
use datafusion::common::{Column, Result};
use datafusion::logical_expr::utils::split_conjunction_owned;
use datafusion::logical_expr::{
    BinaryExpr, Expr, Join, JoinType, LogicalPlan, Operator, Projection,
};

/// Most leaves a region is reordered with: the search visits every
/// connected split of every subset (3^n).
pub const MAX_LEAVES: usize = 10;

/// A join tree over leaf numbers.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    Leaf(usize),
    Join(Box<Shape>, Box<Shape>),
}

impl Shape {
    /// The leaves under this node, as a bit set.
    pub fn set(&self) -> u32 {
        match self {
            Shape::Leaf(i) => 1 << i,
            Shape::Join(l, r) => l.set() | r.set(),
        }
    }
}

/// Two columns of different leaves that the region's rows hold equal,
/// written or implied (`a = b AND b = c` implies `a = c`); `class`
/// numbers the set of columns all equal to each other.
#[derive(Debug, Clone)]
pub struct Equality {
    pub left: (usize, Column),
    pub right: (usize, Column),
    pub class: usize,
}

/// A condition that is not a column equality, with the leaves it reads.
#[derive(Debug, Clone)]
pub struct Condition {
    pub expr: Expr,
    pub leaves: u32,
}

#[derive(Debug)]
pub struct Region {
    pub leaves: Vec<LogicalPlan>,
    pub equalities: Vec<Equality>,
    /// The columns of each class of equal columns, with their leaves
    /// (`Equality::class` numbers them). Two columns of one leaf may share
    /// a class (`a.x = b.x AND b.x = a.y`): no equality between leaves
    /// holds them equal, so a join must (`representatives`).
    pub classes: Vec<Vec<(usize, Column)>>,
    pub conditions: Vec<Condition>,
    /// The order the query was planned in.
    pub written: Shape,
}

impl Region {
    /// The region rooted at `join`, or `None` when it is not an inner
    /// equi-join of at least three leaves whose columns are told apart by
    /// their qualified names (what rebuilding joins by name relies on).
    pub fn of(join: &Join) -> Option<Region> {
        if !reorderable(join) {
            return None;
        }
        let mut pieces = Pieces::default();
        let written = pieces.join(join);
        let Pieces {
            leaves,
            mut pairs,
            filters,
        } = pieces;
        if leaves.len() < 3 || leaves.len() > MAX_LEAVES {
            return None;
        }
        let mut seen = HashSet::new();
        for leaf in &leaves {
            for column in leaf.schema().columns() {
                if !seen.insert(column) {
                    return None;
                }
            }
        }
        let leaf_of = |column: &Column| {
            leaves
                .iter()
                .position(|leaf| leaf.schema().has_column(column))
        };
        let mut conditions = vec![];
        for expr in filters.into_iter().flat_map(split_conjunction_owned) {
            if expr.is_volatile() || has_subquery(&expr) {
                return None;
            }
            if let Some((l, r)) = column_equality(&expr) {
                if leaf_of(&l)? != leaf_of(&r)? {
                    pairs.push((l, r));
                    continue;
                }
            }
            let mut read = 0u32;
            for column in expr.column_refs() {
                read |= 1 << leaf_of(column)?;
            }
            conditions.push(Condition { expr, leaves: read });
        }
        // Keys of different types (a dictionary and its values) are
        // compared through casts a rebuilt join would not repeat.
        let type_of = |c: &Column| {
            let leaf = &leaves[leaf_of(c)?];
            Some(
                leaf.schema()
                    .qualified_field_from_column(c)
                    .ok()?
                    .1
                    .data_type()
                    .clone(),
            )
        };
        for (l, r) in &pairs {
            if type_of(l)? != type_of(r)? {
                return None;
            }
        }
        let mut equalities = vec![];
        let mut classes = vec![];
        for (class, columns) in equal_classes(pairs).into_iter().enumerate() {
            let located = columns
                .into_iter()
                .map(|c| Some((leaf_of(&c)?, c)))
                .collect::<Option<Vec<_>>>()?;
            for (i, left) in located.iter().enumerate() {
                for right in &located[i + 1..] {
                    if left.0 != right.0 {
                        equalities.push(Equality {
                            left: left.clone(),
                            right: right.clone(),
                            class,
                        });
                    }
                }
            }
            classes.push(located);
        }
        Some(Region {
            leaves,
            equalities,
            classes,
            conditions,
            written,
        })
    }

    /// The bit set of every leaf.
    pub fn all(&self) -> u32 {
        (1u32 << self.leaves.len()) - 1
    }

    /// One column of `class` for each group of its columns under `shape`
    /// that the joins there already hold equal: under a leaf each column
    /// is a group of its own (nothing made `a.x = a.y`), and a join whose
    /// two sides both hold the class makes one group of them.
    pub fn representatives(&self, shape: &Shape, class: usize) -> Vec<Column> {
        match shape {
            Shape::Leaf(i) => self.classes[class]
                .iter()
                .filter(|(leaf, _)| leaf == i)
                .map(|(_, column)| column.clone())
                .collect(),
            Shape::Join(a, b) => {
                let mut groups = self.representatives(a, class);
                let right = self.representatives(b, class);
                if groups.is_empty() || right.is_empty() {
                    groups.extend(right);
                } else {
                    groups.truncate(1);
                }
                groups
            }
        }
    }

    /// Whether some equality joins a leaf of `a` to a leaf of `b`.
    pub fn connected(&self, a: u32, b: u32) -> bool {
        self.equalities.iter().any(|e| {
            let (l, r) = (1 << e.left.0, 1 << e.right.0);
            (a & l != 0 && b & r != 0) || (a & r != 0 && b & l != 0)
        })
    }
}

/// The sets of columns that `pairs` make equal to each other.
fn equal_classes(pairs: Vec<(Column, Column)>) -> Vec<Vec<Column>> {
    let mut classes: Vec<Vec<Column>> = vec![];
    for (l, r) in pairs {
        let find =
            |c: &Column, classes: &Vec<Vec<Column>>| classes.iter().position(|k| k.contains(c));
        match (find(&l, &classes), find(&r, &classes)) {
            (Some(a), Some(b)) if a == b => {}
            (Some(a), Some(b)) => {
                let merged = classes.remove(a.max(b));
                classes[a.min(b)].extend(merged);
            }
            (Some(a), None) => classes[a].push(r),
            (None, Some(b)) => classes[b].push(l),
            (None, None) => classes.push(vec![l, r]),
        }
    }
    classes
}

/// An inner join on plain columns whose nulls never match, with no
/// subquery in its condition: one that may be regrouped with its inner
/// join neighbours.
fn reorderable(join: &Join) -> bool {
    join.join_type == JoinType::Inner
        && join.null_equality == NullEquality::NullEqualsNothing
        && !join.null_aware
        && join
            .on
            .iter()
            .all(|(l, r)| matches!((l, r), (Expr::Column(_), Expr::Column(_))))
        && join
            .filter
            .as_ref()
            .is_none_or(|f| !f.is_volatile() && !has_subquery(f))
}

/// What flattening a region collects: its leaves, the column pairs its
/// joins hold equal, and their other conditions.
#[derive(Default)]
struct Pieces {
    leaves: Vec<LogicalPlan>,
    pairs: Vec<(Column, Column)>,
    filters: Vec<Expr>,
}

impl Pieces {
    fn join(&mut self, join: &Join) -> Shape {
        for (l, r) in &join.on {
            if let (Expr::Column(l), Expr::Column(r)) = (l, r) {
                self.pairs.push((l.clone(), r.clone()));
            }
        }
        self.filters.extend(join.filter.clone());
        let left = self.plan(&join.left);
        let right = self.plan(&join.right);
        Shape::Join(Box::new(left), Box::new(right))
    }

    /// Flattens through reorderable joins and projections that only pick
    /// columns (what projection pushdown leaves between joins); anything
    /// else is a leaf.
    fn plan(&mut self, plan: &LogicalPlan) -> Shape {
        match plan {
            LogicalPlan::Join(join) if reorderable(join) => self.join(join),
            LogicalPlan::Projection(Projection { input, .. }) if in_region(plan) => {
                self.plan(input)
            }
            leaf => {
                self.leaves.push(leaf.clone());
                Shape::Leaf(self.leaves.len() - 1)
            }
        }
    }
}

/// Whether `plan` is part of the join region above it: a reorderable
/// join, or a projection that only picks columns of one.
pub fn in_region(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Join(join) => reorderable(join),
        LogicalPlan::Projection(Projection { expr, input, .. }) => {
            expr.iter().all(|e| matches!(e, Expr::Column(_))) && in_region(input)
        }
        _ => false,
    }
}

fn column_equality(expr: &Expr) -> Option<(Column, Column)> {
    match expr {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Eq,
            right,
        }) => match (left.as_ref(), right.as_ref()) {
            (Expr::Column(l), Expr::Column(r)) => Some((l.clone(), r.clone())),
            _ => None,
        },
        _ => None,
    }
}

fn has_subquery(expr: &Expr) -> bool {
    expr.exists(|e| {
        Ok(matches!(
            e,
            Expr::ScalarSubquery(_) | Expr::InSubquery(_) | Expr::Exists(_)
        ))
    })
    .unwrap_or(true)
}

/// A short name for a leaf in EXPLAIN: its alias or table, else its kind.
pub fn leaf_name(plan: &LogicalPlan) -> String {
    match plan {
        LogicalPlan::SubqueryAlias(alias) => alias.alias.to_string(),
        LogicalPlan::TableScan(scan) => scan.table_name.table().to_string(),
        other => match other.inputs().as_slice() {
            [only] => leaf_name(only),
            _ => other.display().to_string(),
        },
    }
}

/// Builds `shape` over `region`'s leaves: each join takes the equalities
/// between its two sides and the conditions it is the first to see every
/// column of; each join's output keeps only the columns still needed
/// above it (`output` or a condition not yet applied).
pub fn build(
    region: &Region,
    shape: &Shape,
    rows: &dyn Fn(u32) -> f64,
    output: &[Column],
) -> Result<Arc<LogicalPlan>> {
    match shape {
        Shape::Leaf(i) => Ok(Arc::new(region.leaves[*i].clone())),
        Shape::Join(a, b) => {
            // The smaller side first: DataFusion builds its hash table
            // from the left input.
            let (a, b) = if rows(b.set()) < rows(a.set()) {
                (b, a)
            } else {
                (a, b)
            };
            let (sa, sb) = (a.set(), b.set());
            let left = build(region, a, rows, output)?;
            let right = build(region, b, rows, output)?;
            // Per class of equal columns, keys that leave every column of it
            // on either side equal: one key joins a group of each side, and
            // each further group of one side is keyed to the other's first
            // (one key per class would leave `a.x = a.y` unchecked when
            // only `a.y` meets the other side).
            let mut on = vec![];
            for class in 0..region.classes.len() {
                let (left_groups, right_groups) = (
                    region.representatives(a, class),
                    region.representatives(b, class),
                );
                let (Some(first_left), Some(first_right)) =
                    (left_groups.first(), right_groups.first())
                else {
                    continue;
                };
                let key =
                    |l: &Column, r: &Column| (Expr::Column(l.clone()), Expr::Column(r.clone()));
                on.push(key(first_left, first_right));
                on.extend(left_groups[1..].iter().map(|l| key(l, first_right)));
                on.extend(right_groups[1..].iter().map(|r| key(first_left, r)));
            }
            let both = sa | sb;
            let applied: Vec<Expr> = region
                .conditions
                .iter()
                .filter(|c| {
                    c.leaves & both == c.leaves
                        && c.leaves & sa != c.leaves
                        && c.leaves & sb != c.leaves
                })
                .map(|c| c.expr.clone())
                .collect();
            let filter = applied.into_iter().reduce(Expr::and);
            let join = Join::try_new(
                left,
                right,
                on,
                filter,
                JoinType::Inner,
                datafusion::common::JoinConstraint::On,
                NullEquality::NullEqualsNothing,
                false,
            )?;
            let joined = LogicalPlan::Join(join);
            let needed: HashSet<Column> = output
                .iter()
                .cloned()
                .chain(
                    region
                        .conditions
                        .iter()
                        .filter(|c| c.leaves & both != c.leaves)
                        .flat_map(|c| c.expr.column_refs().into_iter().cloned()),
                )
                .chain(region.equalities.iter().flat_map(|e| {
                    let inside = (1u32 << e.left.0 | 1u32 << e.right.0) & both;
                    let crosses = inside.count_ones() == 1;
                    crosses
                        .then(|| [e.left.1.clone(), e.right.1.clone()])
                        .into_iter()
                        .flatten()
                }))
                .collect();
            let kept: Vec<Expr> = joined
                .schema()
                .columns()
                .into_iter()
                .filter(|c| needed.contains(c))
                .map(Expr::Column)
                .collect();
            if kept.is_empty() || kept.len() == joined.schema().fields().len() {
                return Ok(Arc::new(joined));
            }
            Ok(Arc::new(LogicalPlan::Projection(Projection::try_new(
                kept,
                Arc::new(joined),
            )?)))
        }
    }
}
