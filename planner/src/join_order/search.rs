//! The join order of least work: every bushy tree over a region's leaves
//! that joins only sets linked by an equality (no cross products), costed
//! as the rows of all its intermediate results (the classic C_out), by
//! dynamic programming over subsets of leaves.

use std::collections::HashMap;

use datafusion::common::Column;

use super::estimate::LeafEstimate;
use super::region::{Region, Shape};

/// The estimate of a set of leaves joined: rows and its key columns'
/// distinct values.
#[derive(Debug, Clone)]
pub struct Joined {
    pub rows: f64,
    distinct: HashMap<Column, f64>,
}

/// The cost model of one region.
pub struct Model<'a> {
    region: &'a Region,
    leaves: Vec<Joined>,
}

impl<'a> Model<'a> {
    /// The model of `region` whose leaves hold `estimates`. A key column
    /// has no more distinct values than the whole table of any column it
    /// equals: lineitem's order keys span the same range as orders' keys,
    /// but orders holds a quarter as many rows as that range, so lineitem
    /// holds at most that many distinct order keys too.
    pub fn new(region: &'a Region, estimates: Vec<LeafEstimate>) -> Self {
        let mut bounds: HashMap<usize, f64> = HashMap::new();
        for e in &region.equalities {
            for (leaf, column) in [&e.left, &e.right] {
                if let Some(whole) = estimates[*leaf].table_distinct.get(column) {
                    let bound = bounds.entry(e.class).or_insert(*whole);
                    *bound = bound.min(*whole);
                }
            }
        }
        let mut leaves: Vec<Joined> = estimates
            .into_iter()
            .map(|e| Joined {
                rows: e.rows,
                distinct: e.distinct,
            })
            .collect();
        for e in &region.equalities {
            for (leaf, column) in [&e.left, &e.right] {
                if let (Some(d), Some(bound)) =
                    (leaves[*leaf].distinct.get_mut(column), bounds.get(&e.class))
                {
                    *d = d.min(*bound);
                }
            }
        }
        Model { region, leaves }
    }

    /// `a` (leaves `sa`) joined to `b` (leaves `sb`): the product of their
    /// rows over the distinct keys of the side with more of them (each key
    /// of the other side is assumed to be among them). A side's distinct
    /// keys are the product of its key columns' distinct values, but at
    /// most its rows: keys of one table are often correlated (a
    /// supplier's key and its nation), so a product alone would
    /// undercount. Without a key pair it is a cross product.
    pub fn join(&self, a: &Joined, sa: u32, b: &Joined, sb: u32) -> Joined {
        // Per set of equal columns crossing the join: the fewest distinct
        // values of its columns on each side.
        let mut classes: HashMap<usize, (f64, f64)> = HashMap::new();
        let mut equal = vec![];
        for e in &self.region.equalities {
            let (l, r) = (1u32 << e.left.0, 1u32 << e.right.0);
            let (from_a, from_b) = if sa & l != 0 && sb & r != 0 {
                (&e.left.1, &e.right.1)
            } else if sa & r != 0 && sb & l != 0 {
                (&e.right.1, &e.left.1)
            } else {
                continue;
            };
            let da = a.distinct.get(from_a).copied().unwrap_or(a.rows);
            let db = b.distinct.get(from_b).copied().unwrap_or(b.rows);
            let class = classes.entry(e.class).or_insert((da, db));
            *class = (class.0.min(da), class.1.min(db));
            equal.push((from_a.clone(), from_b.clone(), da.min(db)));
        }
        let keys_a = classes.values().map(|c| c.0).product::<f64>().min(a.rows);
        let keys_b = classes.values().map(|c| c.1).product::<f64>().min(b.rows);
        let divisor = if classes.is_empty() {
            1.0
        } else {
            keys_a.max(keys_b)
        };
        let rows = (a.rows * b.rows / divisor).max(1.0);
        let mut distinct: HashMap<Column, f64> = a
            .distinct
            .iter()
            .chain(&b.distinct)
            .map(|(c, d)| (c.clone(), d.min(rows)))
            .collect();
        for (ca, cb, d) in equal {
            distinct.insert(ca, d.min(rows));
            distinct.insert(cb, d.min(rows));
        }
        Joined { rows, distinct }
    }

    /// The estimate and cost of `shape` as written.
    pub fn cost_of(&self, shape: &Shape) -> (Joined, f64) {
        match shape {
            Shape::Leaf(i) => (self.leaves[*i].clone(), 0.0),
            Shape::Join(l, r) => {
                let (a, ca) = self.cost_of(l);
                let (b, cb) = self.cost_of(r);
                let joined = self.join(&a, l.set(), &b, r.set());
                let cost = ca + cb + joined.rows;
                (joined, cost)
            }
        }
    }

    /// The cheapest tree joining every leaf without cross products, with
    /// its cost, and every connected set's estimated rows; `None` when the
    /// leaves are not all linked by equalities.
    pub fn cheapest(&self) -> Option<(Shape, f64, HashMap<u32, f64>)> {
        let all = self.region.all();
        let mut best: Vec<Option<(f64, Joined, u32)>> = vec![None; all as usize + 1];
        for (i, leaf) in self.leaves.iter().enumerate() {
            best[1 << i] = Some((0.0, leaf.clone(), 0));
        }
        for set in 1..=all {
            if set.count_ones() < 2 {
                continue;
            }
            let lowest = set & set.wrapping_neg();
            let mut part = (set - 1) & set;
            while part > 0 {
                // Each split once: the part holding the lowest leaf.
                if part & lowest != 0 {
                    let rest = set & !part;
                    if let (Some((ca, a, _)), Some((cb, b, _))) =
                        (&best[part as usize], &best[rest as usize])
                    {
                        if self.region.connected(part, rest) {
                            let joined = self.join(a, part, b, rest);
                            let cost = ca + cb + joined.rows;
                            let better = best[set as usize]
                                .as_ref()
                                .is_none_or(|(known, _, _)| cost < *known);
                            if better {
                                best[set as usize] = Some((cost, joined, part));
                            }
                        }
                    }
                }
                part = (part - 1) & set;
            }
        }
        let (cost, _, _) = best[all as usize].as_ref()?;
        let rows = best
            .iter()
            .enumerate()
            .filter_map(|(set, b)| b.as_ref().map(|(_, j, _)| (set as u32, j.rows)))
            .collect();
        Some((shape_of(&best, all), *cost, rows))
    }
}

fn shape_of(best: &[Option<(f64, Joined, u32)>], set: u32) -> Shape {
    match best[set as usize].as_ref() {
        Some((_, _, part)) if *part != 0 => Shape::Join(
            Box::new(shape_of(best, *part)),
            Box::new(shape_of(best, set & !part)),
        ),
        _ => Shape::Leaf(set.trailing_zeros() as usize),
    }
}
