//! Joins and aggregates on a key the tables store their rows in order of,
//! split by key range instead of shuffled.
//!
//! A partitioned join needs the rows of each key in one partition on both
//! sides; DataFusion gets that by hashing both inputs, which across
//! processes is a shuffle: every row encoded, sent and decoded (TPC-H q3 at
//! SF10 ships 32 M `lineitem` rows to join them with `orders`). When both
//! inputs read their key from Parquet files whose row groups hold narrow,
//! ordered key ranges (files written in key order, as TPC-H's are), the
//! same co-location costs nothing: cut the key's domain into ranges, and
//! let partition *j* of each side read the row groups of range *j* and
//! keep its rows (`ranges`). The shuffles go, and the join runs in the
//! tasks that scan, each reading its own part of both tables. The same
//! holds for an aggregate grouped by such a key (q18's `lineitem` by
//! `l_orderkey`: no shuffle of 15 M partial groups).
//!
//! Where only one input of a join can be split (the other's key comes
//! from a join below, or from a table not in key order), the other is
//! still shuffled, but by the same ranges instead of by hash (`routing`):
//! the larger table is usually the one in key order, and it stays where it
//! is read (q18 shuffles `customer ⋈ orders`, not `lineitem`).
//!
//! The key is followed from the join (or aggregate) down to the scan that
//! reads it through operators that keep each partition's rows in that
//! partition (`trace`); an input that another split already cut is reused
//! with its cuts, so a chain of joins on one key (q21's `lineitem`,
//! `orders`, `lineitem` again) is cut one way throughout. Whatever the
//! rewrite cannot prove it leaves as it was: a plan in which some operator
//! would pair a split input with a hashed one is left whole
//! (`partners_agree`). `SET squadron.key_range_splits = false` turns it
//! off. It runs on DataFusion's optimized plan (`KeyRangeSplitPlanner`):
//! DataFusion's closing checks know no co-partitioning but by hash (its
//! range partitioning is declared, not yet planned or executed), and the
//! split inputs are unions, which declare none.

mod ranges;
mod routing;
#[cfg(test)]
mod tests;
mod trace;

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::execution::context::QueryPlanner;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExprRef;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::union::InterleaveExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, Partitioning};
use squadron_exec::squadron_options::SquadronOptions;

use crate::cached_footers::CachedFooters;
use crate::join_order::JoinOrderPlanner;
use ranges::{Cuts, KeyedScan};
use routing::routed_by_range;
use trace::{trace, Traced};

/// DataFusion's physical plan (with the join order of `JoinOrderPlanner`),
/// its partitioned joins' and aggregates' inputs then split by key range
/// where their tables' row groups allow it.
#[derive(Debug, Default)]
pub struct KeyRangeSplitPlanner;

#[async_trait]
impl QueryPlanner for KeyRangeSplitPlanner {
    async fn create_physical_plan(
        &self,
        plan: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let physical = JoinOrderPlanner.create_physical_plan(plan, session).await?;
        let footers = session
            .runtime_env()
            .cache_manager
            .get_file_metadata_cache();
        split_by_key_ranges(
            physical,
            session.config_options(),
            &CachedFooters::new(footers),
        )
    }
}

/// `plan` with the inputs of its partitioned joins and aggregates split by
/// key range where the footers in `footers` show their row groups allow
/// it (and `squadron.key_range_splits` is on).
pub fn split_by_key_ranges(
    plan: Arc<dyn ExecutionPlan>,
    config: &ConfigOptions,
    footers: &CachedFooters,
) -> Result<Arc<dyn ExecutionPlan>> {
    if !SquadronOptions::of(config).key_range_splits {
        return Ok(plan);
    }
    // An interleave pairs its inputs' partitions by hash, which it checks
    // when rebuilt: over inputs split by range it cannot be (and a union
    // of inputs cut apart could not prove their cuts equal anyway).
    if plan.exists(|node| Ok(node.is::<InterleaveExec>()))? {
        return Ok(plan);
    }
    let mut splitter = Splitter {
        footers,
        splits: vec![],
    };
    let split = Arc::clone(&plan)
        .transform_up(|node| splitter.split(node))?
        .data;
    if splitter.splits.is_empty() || !splitter.partners_agree(&split) {
        return Ok(plan);
    }
    Ok(split)
}

/// An input split by key range: the node whose partition *j* holds range
/// *j* (the union of a split scan, or a shuffle routed by range), the
/// key's column in it, and the cuts.
struct Split {
    node: Arc<dyn ExecutionPlan>,
    column: usize,
    cuts: Cuts,
}

/// Where an input's key comes from.
enum Origin {
    /// An input split by these cuts.
    Split(Cuts),
    /// A scan that can be.
    Scan(Box<KeyedScan>),
}

/// An input partitioned by a split's cuts: its plan, the split to
/// remember (none when it was split already), and whether it is split
/// rather than shuffled by range.
struct Partitioned {
    plan: Arc<dyn ExecutionPlan>,
    split: Option<Split>,
    from_scan: bool,
}

/// A join's or aggregate's input: its hash shuffle if it has one, the plan
/// below it (which a split reads instead), its key's column, and where the
/// key comes from.
struct KeyedInput {
    shuffle: Option<Arc<dyn ExecutionPlan>>,
    below: Arc<dyn ExecutionPlan>,
    key: usize,
    traced: Traced,
}

struct Splitter<'a> {
    footers: &'a CachedFooters,
    splits: Vec<Split>,
}

impl Splitter<'_> {
    fn split(
        &mut self,
        node: Arc<dyn ExecutionPlan>,
    ) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
        let rewritten = if let Some(join) = node.downcast_ref::<HashJoinExec>() {
            match join.partition_mode() {
                PartitionMode::Partitioned => self.split_join(join)?,
                _ => None,
            }
        } else if let Some(aggregate) = node.downcast_ref::<AggregateExec>() {
            match aggregate.mode() {
                AggregateMode::FinalPartitioned | AggregateMode::SinglePartitioned => {
                    self.split_aggregate(aggregate)?
                }
                _ => None,
            }
        } else {
            None
        };
        let Some(children) = rewritten else {
            return Ok(Transformed::no(node));
        };
        // A join's dynamic filter (if DataFusion placed one) routes probe
        // rows by hash to the partition that built it: no longer where they
        // go. Without it the join runs as planned; workers wire their own.
        if let Some(join) = node.downcast_ref::<HashJoinExec>() {
            let rebuilt = join.builder().reset_state().with_new_children(children)?;
            return Ok(Transformed::yes(rebuilt.build_exec()?));
        }
        #[allow(deprecated)] // replace_children needs options we have no use for
        Ok(Transformed::yes(node.with_new_children(children)?))
    }

    /// The join's inputs split on one of its key pairs, if any can be:
    /// at least one input split from its scan (or split already), the
    /// other split likewise or shuffled by the same ranges.
    fn split_join(&mut self, join: &HashJoinExec) -> Result<Option<Vec<Arc<dyn ExecutionPlan>>>> {
        let partitions = join.properties().output_partitioning().partition_count();
        for (left_key, right_key) in join.on() {
            let (Some(left), Some(right)) = (
                keyed_input(join.left(), left_key),
                keyed_input(join.right(), right_key),
            ) else {
                continue;
            };
            let origins = [self.origin(&left), self.origin(&right)];
            let Some(cuts) = shared_cuts(&origins, partitions) else {
                continue;
            };
            let mut inputs = vec![];
            let mut splits = vec![];
            let mut any_split = false;
            for (input, origin) in [(&left, &origins[0]), (&right, &origins[1])] {
                let Some(partitioned) = self.partitioned(input, origin.as_ref(), &cuts)? else {
                    break;
                };
                inputs.push(partitioned.plan);
                splits.extend(partitioned.split);
                any_split |= partitioned.from_scan;
            }
            if inputs.len() == 2 && any_split {
                self.splits.extend(splits);
                return Ok(Some(inputs));
            }
        }
        Ok(None)
    }

    /// The aggregate's input without its hash shuffle, split on one of the
    /// shuffle's keys, if any can be.
    fn split_aggregate(
        &mut self,
        aggregate: &AggregateExec,
    ) -> Result<Option<Vec<Arc<dyn ExecutionPlan>>>> {
        let input = aggregate.input();
        let Some(shuffle) = input.downcast_ref::<RepartitionExec>() else {
            return Ok(None);
        };
        let Partitioning::Hash(keys, partitions) = shuffle.partitioning() else {
            return Ok(None);
        };
        for key in keys {
            let Some(keyed) = keyed_input(input, key) else {
                continue;
            };
            let Some(origin) = self.origin(&keyed) else {
                continue;
            };
            let cuts = match &origin {
                Origin::Split(cuts) => cuts.clone(),
                Origin::Scan(scan) => match scan.cuts(*partitions) {
                    Some(cuts) => cuts,
                    None => continue,
                },
            };
            // Only a split input: a shuffle by range instead of by hash
            // would save nothing here.
            if let Some(partitioned) = self.partitioned(&keyed, Some(&origin), &cuts)? {
                if partitioned.from_scan {
                    self.splits.extend(partitioned.split);
                    return Ok(Some(vec![partitioned.plan]));
                }
            }
        }
        Ok(None)
    }

    /// Where `input`'s key comes from: a split (whose key column it must
    /// be), or, below a shuffle, a scan that can be split.
    fn origin(&self, input: &KeyedInput) -> Option<Origin> {
        let traced = &input.traced;
        if let Some(split) = self
            .splits
            .iter()
            .find(|s| Arc::ptr_eq(&s.node, &traced.origin))
        {
            return (split.column == traced.column).then(|| Origin::Split(split.cuts.clone()));
        }
        input.shuffle.as_ref()?;
        KeyedScan::of(&traced.origin, traced.column, self.footers)
            .map(|scan| Origin::Scan(Box::new(scan)))
    }

    /// `input` partitioned by `cuts`: as it is when split so already, with
    /// its scan split, or else its shuffle routed by range; with the split
    /// to remember, and whether the input is split (not shuffled).
    fn partitioned(
        &self,
        input: &KeyedInput,
        origin: Option<&Origin>,
        cuts: &Cuts,
    ) -> Result<Option<Partitioned>> {
        match origin {
            Some(Origin::Split(_)) => {
                return Ok(Some(Partitioned {
                    plan: Arc::clone(&input.below),
                    split: None,
                    from_scan: true,
                }))
            }
            Some(Origin::Scan(scan)) => {
                if let Some(union) = scan.split(cuts)? {
                    let split = Split {
                        node: Arc::clone(&union),
                        column: input.traced.column,
                        cuts: cuts.clone(),
                    };
                    let plan = replaced_along(&input.below, &input.traced.path, union)?;
                    return Ok(Some(Partitioned {
                        plan,
                        split: Some(split),
                        from_scan: true,
                    }));
                }
            }
            None => {}
        }
        let Some(shuffle) = input
            .shuffle
            .as_ref()
            .and_then(|s| s.downcast_ref::<RepartitionExec>())
        else {
            return Ok(None);
        };
        Ok(routed_by_range(shuffle, input.key, cuts)?.map(|routed| {
            let split = Split {
                node: Arc::clone(&routed),
                column: input.key,
                cuts: cuts.clone(),
            };
            Partitioned {
                plan: routed,
                split: Some(split),
                from_scan: false,
            }
        }))
    }

    /// Whether every operator that pairs the partitions of its inputs
    /// (a partitioned join) sees them split by the same cuts, or none split.
    fn partners_agree(&self, plan: &Arc<dyn ExecutionPlan>) -> bool {
        let children = plan.children();
        if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
            if *join.partition_mode() == PartitionMode::Partitioned && !self.keys_agree(join) {
                return false;
            }
        }
        if pairs_partitions(plan) {
            let schemes: Vec<Option<&Cuts>> =
                children.iter().map(|child| self.split_by(child)).collect();
            if schemes.iter().any(Option::is_some) && schemes.windows(2).any(|w| w[0] != w[1]) {
                return false;
            }
        }
        children.iter().all(|child| self.partners_agree(child))
    }

    /// Whether a partitioned join whose inputs are split (either) pairs
    /// them on a key both are split on, by the same cuts. Equal cuts are
    /// not enough: an input split on a column the join does not key on
    /// (for another join above) pairs rows of one key range of that
    /// column with rows of another range of the key.
    fn keys_agree(&self, join: &HashJoinExec) -> bool {
        if self.split_by(join.left()).is_none() && self.split_by(join.right()).is_none() {
            return true;
        }
        join.on().iter().any(|(left, right)| {
            match (
                self.split_on(join.left(), left),
                self.split_on(join.right(), right),
            ) {
                (Some(a), Some(b)) => a == b,
                _ => false,
            }
        })
    }

    /// The cuts `plan` is split by on `key` itself: the key's column passes
    /// unchanged down to a split input, and is the column it was split on.
    fn split_on(&self, plan: &Arc<dyn ExecutionPlan>, key: &PhysicalExprRef) -> Option<&Cuts> {
        let traced = trace(plan, key.downcast_ref::<Column>()?.index());
        self.splits
            .iter()
            .find(|s| Arc::ptr_eq(&s.node, &traced.origin) && s.column == traced.column)
            .map(|s| &s.cuts)
    }

    /// The cuts partition *i* of `plan` holds range *i* of, if any.
    fn split_by(&self, plan: &Arc<dyn ExecutionPlan>) -> Option<&Cuts> {
        if let Some(split) = self.splits.iter().find(|s| Arc::ptr_eq(&s.node, plan)) {
            return Some(&split.cuts);
        }
        let children = plan.children();
        if plan.is::<RepartitionExec>() || children.is_empty() {
            return None;
        }
        if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
            return match join.partition_mode() {
                PartitionMode::Partitioned => self
                    .split_by(join.left())
                    .or_else(|| self.split_by(join.right())),
                _ => self.split_by(join.right()),
            };
        }
        let same_partitions = children.len() == 1
            && children[0].output_partitioning().partition_count()
                == plan.output_partitioning().partition_count();
        match plan.name() {
            "NestedLoopJoinExec" | "CrossJoinExec" => self.split_by(children[1]),
            _ if same_partitions => self.split_by(children[0]),
            _ => None,
        }
    }
}

/// Whether `plan` joins partition *i* of one input with partition *i* of
/// another.
fn pairs_partitions(plan: &Arc<dyn ExecutionPlan>) -> bool {
    if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        return *join.partition_mode() != PartitionMode::CollectLeft;
    }
    !matches!(
        plan.name(),
        "UnionExec" | "NestedLoopJoinExec" | "CrossJoinExec"
    ) && plan.children().len() > 1
}

/// `child` with its key column's origin, looked for below its hash
/// shuffle if it has one; `None` when the key is not a column or the
/// input is shuffled otherwise.
fn keyed_input(child: &Arc<dyn ExecutionPlan>, key: &PhysicalExprRef) -> Option<KeyedInput> {
    let key = key.downcast_ref::<Column>()?.index();
    let (shuffle, below) = match child.downcast_ref::<RepartitionExec>() {
        Some(shuffle) => match shuffle.partitioning() {
            Partitioning::Hash(..) => (Some(Arc::clone(child)), Arc::clone(shuffle.input())),
            _ => return None,
        },
        None => (None, Arc::clone(child)),
    };
    let traced = trace(&below, key);
    Some(KeyedInput {
        shuffle,
        below,
        key,
        traced,
    })
}

/// The cuts two inputs can share: those of an input split already, else
/// where the larger splittable scan's rows fall evenly.
fn shared_cuts(origins: &[Option<Origin>; 2], partitions: usize) -> Option<Cuts> {
    match origins {
        [Some(Origin::Split(a)), Some(Origin::Split(b))] => (a == b).then(|| a.clone()),
        [Some(Origin::Split(cuts)), _] | [_, Some(Origin::Split(cuts))] => Some(cuts.clone()),
        [Some(Origin::Scan(a)), Some(Origin::Scan(b))] => {
            let (larger, smaller) = if a.rows() >= b.rows() { (a, b) } else { (b, a) };
            larger.cuts(partitions).or_else(|| smaller.cuts(partitions))
        }
        [Some(Origin::Scan(scan)), None] | [None, Some(Origin::Scan(scan))] => {
            scan.cuts(partitions)
        }
        [None, None] => None,
    }
}

/// `plan` with the node at `path` (child indexes, top first) replaced.
fn replaced_along(
    plan: &Arc<dyn ExecutionPlan>,
    path: &[usize],
    replacement: Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let Some((first, rest)) = path.split_first() else {
        return Ok(replacement);
    };
    let mut children: Vec<Arc<dyn ExecutionPlan>> = plan.children().into_iter().cloned().collect();
    children[*first] = replaced_along(&children[*first], rest, replacement)?;
    #[allow(deprecated)] // replace_children needs options we have no use for
    Arc::clone(plan).with_new_children(children)
}
