//! Every rewrite Squadron makes of a plan, in the order a statement meets
//! them: DataFusion rules we add, the query planner's steps, the
//! coordinator's plan reuse, the distributed passes, the cut, and what
//! each task changes in its own plan.
//!
//! One list, so a user who hits a wrong answer (or a developer adding a
//! rewrite) finds each one, where it lives, what it assumes and the
//! setting that turns it off. `EXPLAIN VERBOSE` prints it with the
//! session's settings; `docs/correctness.md` has the same table. Tests
//! where each kind of rewrite is applied (the planning context, the
//! distributed passes, the task rewrites) check this list matches what
//! runs, so the list cannot drift from the code.

use crate::squadron_options::SquadronOptions;
use datafusion::common::config::ExtensionOptions;

/// Where in a statement's life a rewrite runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// A DataFusion logical optimizer rule (the coordinator's session).
    LogicalRule,
    /// The coordinator's query planner, on the optimized logical plan or
    /// on DataFusion's physical plan.
    QueryPlanner,
    /// A DataFusion physical optimizer rule (the coordinator's session).
    PhysicalRule,
    /// The coordinator, between statements of a session.
    Coordinator,
    /// A pass over the whole plan before it is cut into stages.
    DistributedPass,
    /// Cutting the plan into stages.
    Cut,
    /// Each task, on its worker, in its own plan.
    TaskLocal,
    /// Every process, as it makes a plan ready to execute (the
    /// coordinator's own runs and every task).
    Execution,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Self::LogicalRule => "logical rule",
            Self::QueryPlanner => "query planner",
            Self::PhysicalRule => "physical rule",
            Self::Coordinator => "coordinator",
            Self::DistributedPass => "distributed pass",
            Self::Cut => "cut",
            Self::TaskLocal => "task-local",
            Self::Execution => "execution",
        }
    }
}

/// What turns a rewrite off for a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    /// Nothing: the answer depends on it (it keeps a plan split over
    /// processes correct), it is not there for speed.
    Always,
    /// `squadron.<name> = false`.
    Flag(&'static str),
    /// `squadron.<name> = 0`.
    Threshold(&'static str),
}

/// One rewrite of a plan.
#[derive(Debug, Clone, Copy)]
pub struct Rewrite {
    /// As the code names it: a DataFusion rule's `name()`, a distributed
    /// pass's `EXPLAIN VERBOSE` row, a task rewrite's entry.
    pub name: &'static str,
    pub phase: Phase,
    /// The file or module that holds it, from the workspace root.
    pub path: &'static str,
    pub switch: Switch,
    /// Applied by another rewrite of this list, as a part of it.
    pub part_of: Option<&'static str>,
    /// What it takes for granted about the plan and the data: what a
    /// wrong answer would break.
    pub assumes: &'static str,
}

impl Rewrite {
    /// Whether `options` leave it on.
    pub fn is_on(&self, options: &SquadronOptions) -> bool {
        match self.switch {
            Switch::Always => true,
            Switch::Flag(name) => setting(options, name).is_some_and(|v| v == "true"),
            Switch::Threshold(name) => setting(options, name).is_some_and(|v| v != "0"),
        }
    }

    /// The setting that turns it off, as `SET` names it.
    pub fn setting(&self) -> Option<String> {
        match self.switch {
            Switch::Always => None,
            Switch::Flag(name) | Switch::Threshold(name) => Some(format!("squadron.{name}")),
        }
    }
}

fn setting(options: &SquadronOptions, name: &str) -> Option<String> {
    let key = format!("squadron.{name}");
    options
        .entries()
        .into_iter()
        .find(|entry| entry.key == key)
        .and_then(|entry| entry.value)
}

/// The rewrites of this phase, in order.
pub fn of_phase(phase: Phase) -> impl Iterator<Item = &'static Rewrite> {
    REWRITES.iter().filter(move |r| r.phase == phase)
}

/// The list, one line per rewrite, with whether `options` leave it on:
/// what `EXPLAIN VERBOSE` shows.
pub fn describe(options: &SquadronOptions) -> String {
    REWRITES
        .iter()
        .enumerate()
        .map(|(i, rewrite)| {
            let state = match rewrite.setting() {
                None => "always (correctness)".to_string(),
                Some(setting) => {
                    let on = if rewrite.is_on(options) { "on" } else { "off" };
                    format!("{on} ({setting})")
                }
            };
            let part_of = rewrite
                .part_of
                .map(|p| format!(", part of {p}"))
                .unwrap_or_default();
            format!(
                "{:>2}. {} [{}{part_of}, {}]: {state}",
                i + 1,
                rewrite.name,
                rewrite.phase.name(),
                rewrite.path
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every rewrite, in the order a statement meets them.
pub const REWRITES: &[Rewrite] = &[
    Rewrite {
        name: "squadron_checked_scalar_subqueries",
        phase: Phase::LogicalRule,
        path: "planner/src/scalar_subquery.rs",
        switch: Switch::Always,
        part_of: None,
        assumes: "A scalar subquery must check it returns at most one row before DataFusion \
                  turns it into a join, which would repeat the outer row instead",
    },
    Rewrite {
        name: "JoinOrder",
        phase: Phase::QueryPlanner,
        path: "planner/src/join_order",
        switch: Switch::Flag("join_reorder"),
        part_of: None,
        assumes: "A region of inner equi-joins may be rebuilt in any order if every class of \
                  equal columns stays equal: a join keys every group of the class on each side",
    },
    Rewrite {
        name: "JoinOrderSamples",
        phase: Phase::QueryPlanner,
        path: "planner/src/join_order",
        switch: Switch::Flag("join_reorder_samples"),
        part_of: Some("JoinOrder"),
        assumes: "Sampled rows stand for the table's (changes only the order chosen)",
    },
    Rewrite {
        name: "file_statistics_as_bounds",
        phase: Phase::PhysicalRule,
        path: "planner/src/statistics_bounds.rs",
        switch: Switch::Always,
        part_of: None,
        assumes: "Parquet min/max are bounds of the non-NULL, non-NaN values of a row group",
    },
    Rewrite {
        name: "NulledConstantsUnordered",
        phase: Phase::PhysicalRule,
        path: "planner/src/nulled_constants.rs",
        switch: Switch::Always,
        part_of: None,
        assumes: "DataFusion 55 keeps a column a filter holds constant as constant where \
                  grouping sets or an outer join's unmatched rows make it NULL: nothing above \
                  such an operator (a sort for ORDER BY) may drop it",
    },
    Rewrite {
        name: "FilterPushdown",
        phase: Phase::PhysicalRule,
        path: "planner/src/filter_pushdown_fence.rs",
        switch: Switch::Always,
        part_of: None,
        assumes: "DataFusion's pushdown, fenced off nodes whose output repeats a column name: \
                  DataFusion 55 remaps a filter by name and would move it onto the wrong column",
    },
    Rewrite {
        name: "ProjectionPushdown",
        phase: Phase::PhysicalRule,
        path: "planner/src/projection_pushdown_fence.rs",
        switch: Switch::Always,
        part_of: None,
        assumes: "DataFusion's projection pushdown, fenced above filters that carry a \
                  projection: DataFusion 55 matches such a filter's predicate against the \
                  projection above in the wrong index space and can read other columns",
    },
    Rewrite {
        name: "NoTopKAggregationOverFloats",
        phase: Phase::PhysicalRule,
        path: "planner/src/float_top_k.rs",
        switch: Switch::Always,
        part_of: None,
        assumes: "DataFusion 55's top-k of groups finds an evicted group again by equality, \
                  which a NaN group fails (a panic): over float keys or values the aggregate \
                  keeps every group and the sort above takes the limit",
    },
    Rewrite {
        name: "NoShuffleAfterOnePartition",
        phase: Phase::PhysicalRule,
        path: "planner/src/one_partition.rs",
        switch: Switch::Flag("one_partition_tails"),
        part_of: None,
        assumes: "One partition meets every distribution an operator above can require",
    },
    Rewrite {
        name: "paired_inputs_hash_routed",
        phase: Phase::PhysicalRule,
        path: "planner/src/file_group_partitions.rs",
        switch: Switch::Always,
        part_of: None,
        assumes: "An input partitioned by file groups (Hive-style key directories) is not \
                  partitioned by the hash a shuffle routes with: paired with a shuffled input, \
                  it must be shuffled by that hash too",
    },
    Rewrite {
        name: "NanSafePruning",
        phase: Phase::PhysicalRule,
        path: "planner/src/nan_safe_pruning.rs",
        switch: Switch::Flag("nan_safe_pruning"),
        part_of: None,
        assumes: "Parquet statistics leave NaN out of a float column's min and max, which \
                  DataFusion 55 prunes by although NaN satisfies every comparison but `=` \
                  in its total order: such comparisons are hidden from pruning",
    },
    Rewrite {
        name: "pruned_scan_ranges",
        phase: Phase::PhysicalRule,
        path: "planner/src/pruned_scan_ranges.rs",
        switch: Switch::Flag("scan_range_pruning"),
        part_of: None,
        assumes: "A row group whose statistics contradict the filter holds no row of the answer",
    },
    Rewrite {
        name: "KeyRangeSplits",
        phase: Phase::QueryPlanner,
        path: "planner/src/key_range_splits",
        switch: Switch::Flag("key_range_splits"),
        part_of: None,
        assumes: "Row groups of the key hold narrow, ordered, non-NULL ranges; a range read \
                  keeps exactly its rows",
    },
    Rewrite {
        name: "PlanReuse",
        phase: Phase::Coordinator,
        path: "planner/src/templates",
        switch: Switch::Flag("reuse_plans"),
        part_of: None,
        assumes: "A statement differing from an earlier one only in constants plans alike \
                  (its scan ranges pruned again for its constants)",
    },
    Rewrite {
        name: "WithoutOutputMerge",
        phase: Phase::DistributedPass,
        path: "planner/src/cut.rs",
        switch: Switch::Always,
        part_of: None,
        assumes: "A coalesce without a limit at the top of the plan only merges the final \
                  tasks' streams, which the job output does itself",
    },
    Rewrite {
        name: "MergeSubsetKeyShuffles",
        phase: Phase::DistributedPass,
        path: "planner/src/subset_key_shuffles.rs",
        switch: Switch::Threshold("subset_key_max_rows"),
        part_of: None,
        assumes: "A shuffle on keys K also co-locates every subset of K",
    },
    Rewrite {
        name: "ReduceShuffles",
        phase: Phase::DistributedPass,
        path: "planner/src/reduced_shuffles.rs",
        switch: Switch::Flag("reduced_shuffles"),
        part_of: None,
        assumes: "The build side computes the same rows for the join and for the reduction; a \
                  dropped key matches nothing above",
    },
    Rewrite {
        name: "SharedShuffles",
        phase: Phase::Cut,
        path: "planner/src/cut.rs",
        switch: Switch::Flag("shared_shuffles"),
        part_of: None,
        assumes: "Two subtrees that display and encode alike compute the same rows",
    },
    Rewrite {
        name: "DynamicFilters",
        phase: Phase::TaskLocal,
        path: "task_rewrites/src/dynamic_filters",
        switch: Switch::Flag("dynamic_filters"),
        part_of: None,
        assumes: "A build side is complete when its filter is published; a key's span fits u64 \
                  arithmetic (saturating)",
    },
    Rewrite {
        name: "BloomFilters",
        phase: Phase::TaskLocal,
        path: "exec/src/key_filters/bloom.rs",
        switch: Switch::Flag("bloom_filters"),
        part_of: Some("DynamicFilters"),
        assumes: "A Bloom filter keeps every build key",
    },
    Rewrite {
        name: "NarrowDecimals",
        phase: Phase::TaskLocal,
        path: "task_rewrites/src/narrow_decimals",
        switch: Switch::Flag("narrow_decimals"),
        part_of: None,
        assumes: "A batch's magnitudes bound every result within i64",
    },
    Rewrite {
        name: "LikeSubstrings",
        phase: Phase::TaskLocal,
        path: "task_rewrites/src/like_substrings",
        switch: Switch::Flag("like_substrings"),
        part_of: None,
        assumes: "The pattern is `%` and literals only",
    },
    Rewrite {
        name: "AdaptiveFilters",
        phase: Phase::TaskLocal,
        path: "task_rewrites/src/conjunct_order",
        switch: Switch::Flag("adaptive_filters"),
        part_of: None,
        assumes: "The terms cannot fail, so their order changes nothing but cost",
    },
    Rewrite {
        name: "grouping_sets_unordered",
        phase: Phase::Execution,
        path: "exec/src/plan/grouping_sets.rs",
        switch: Switch::Always,
        part_of: None,
        assumes: "DataFusion 55 takes a grouping column a filter holds constant as constant \
                  after grouping sets NULL it: a final aggregate over grouping sets must not \
                  run as sorted",
    },
];

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::path::Path;

    use super::*;

    #[test]
    fn every_switch_is_a_setting_and_every_path_exists() {
        let defaults = SquadronOptions::default();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut names = HashSet::new();
        for rewrite in REWRITES {
            assert!(names.insert(rewrite.name), "{} listed twice", rewrite.name);
            if let Switch::Flag(name) | Switch::Threshold(name) = rewrite.switch {
                assert!(setting(&defaults, name).is_some(), "no squadron.{name}");
            }
            assert!(root.join(rewrite.path).exists(), "{}", rewrite.path);
            if let Some(whole) = rewrite.part_of {
                assert!(REWRITES.iter().any(|r| r.name == whole), "{whole}");
            }
        }
    }

    #[test]
    fn settings_turn_their_rewrites_off() {
        let mut options = SquadronOptions::default();
        let find = |name| REWRITES.iter().find(|r| r.name == name).unwrap();
        assert!(find("ReduceShuffles").is_on(&options));
        assert!(find("MergeSubsetKeyShuffles").is_on(&options));
        assert!(!find("BloomFilters").is_on(&options));
        options.set("reduced_shuffles", "false").unwrap();
        options.set("subset_key_max_rows", "0").unwrap();
        assert!(!find("ReduceShuffles").is_on(&options));
        assert!(!find("MergeSubsetKeyShuffles").is_on(&options));
        let described = describe(&options);
        assert!(described.contains("ReduceShuffles [distributed pass, planner/src/reduced_shuffles.rs]: off (squadron.reduced_shuffles)"), "{described}");
        assert!(described.contains("FilterPushdown [physical rule, planner/src/filter_pushdown_fence.rs]: always (correctness)"), "{described}");
        assert_eq!(described.lines().count(), REWRITES.len());
    }

    /// The documented table lists every rewrite, by the name the code uses.
    #[test]
    fn the_documented_table_lists_every_rewrite() {
        let doc = include_str!("../../docs/correctness.md");
        for rewrite in REWRITES {
            let row = format!("| `{}` |", rewrite.name);
            assert!(doc.contains(&row), "docs/correctness.md lacks a row {row}");
        }
    }
}
