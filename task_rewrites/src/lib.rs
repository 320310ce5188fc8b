//! What a task changes in its own plan, on its worker, for speed alone.
//! Each rewrite has a `squadron.*` setting that turns it off, and each is
//! listed, in the order applied here, in `squadron_exec::rewrites` (a
//! test below keeps the two lists equal).
//!
//! - `dynamic_filters`: a join's build side, once complete, prunes the
//!   scans (and the stage reads) of its probe side; a TopK's threshold the
//!   scans below it
//! - `narrow_decimals`: decimal `+`, `-`, `*` in 64 bits where a batch's
//!   values allow it
//! - `like_substrings`: `LIKE` patterns of several literals as substring
//!   searches
//! - `conjunct_order`: a filter's terms in the order its batches show is
//!   cheapest
//!
//! A rewrite that belongs here changes nothing but cost, and needs
//! nothing but the task's own plan and session: what needs the whole
//! plan, or other tasks, is the coordinator's (`squadron_planner`).

pub mod conjunct_order;
pub mod dynamic_filters;
pub mod like_substrings;
pub mod narrow_decimals;

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::{DataFusionError, Result};
use datafusion::physical_plan::ExecutionPlan;
use squadron_exec::squadron_options::SquadronOptions;

/// A rewrite of one task's plan, under its session's settings.
pub type PlanRewrite = fn(Arc<dyn ExecutionPlan>, &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>>;

/// One task-local rewrite: its name in `squadron_exec::rewrites`, whether
/// the session has it on, and the rewrite.
pub struct TaskRewrite {
    pub name: &'static str,
    pub is_on: fn(&SquadronOptions) -> bool,
    pub rewrite: PlanRewrite,
}

/// The task-local rewrites, in the order they apply. Dynamic filters
/// come first: the others replace expressions and filters the pushed
/// filters must find as DataFusion planned them.
pub const TASK_REWRITES: &[TaskRewrite] = &[
    TaskRewrite {
        name: "DynamicFilters",
        is_on: |options| options.dynamic_filters,
        rewrite: dynamic_filters::with_dynamic_filters,
    },
    TaskRewrite {
        name: "NarrowDecimals",
        is_on: |options| options.narrow_decimals,
        rewrite: |plan, _| narrow_decimals::with_narrow_decimals(plan),
    },
    TaskRewrite {
        name: "LikeSubstrings",
        is_on: |options| options.like_substrings,
        rewrite: |plan, _| like_substrings::with_substring_likes(plan),
    },
    TaskRewrite {
        name: "AdaptiveFilters",
        is_on: |options| options.adaptive_filters,
        rewrite: |plan, _| conjunct_order::with_adaptive_conjunctions(plan),
    },
];

/// `plan` (one task's) with every task-local rewrite its session has on,
/// in order. An error names the rewrite that failed.
pub fn with_task_rewrites(
    plan: Arc<dyn ExecutionPlan>,
    options: &ConfigOptions,
) -> Result<Arc<dyn ExecutionPlan>> {
    let squadron = SquadronOptions::of(options);
    TASK_REWRITES
        .iter()
        .filter(|rewrite| (rewrite.is_on)(&squadron))
        .try_fold(plan, |plan, rewrite| {
            (rewrite.rewrite)(plan, options).map_err(|e| {
                DataFusionError::Internal(format!("task rewrite {}: {e}", rewrite.name))
            })
        })
}

#[cfg(test)]
mod tests {
    use squadron_exec::rewrites::{of_phase, Phase};

    use super::*;

    /// The list of every rewrite names these, in this order, and each is
    /// on and off exactly as its documented setting says.
    #[test]
    fn the_task_rewrites_are_the_listed_ones() {
        let listed: Vec<_> = of_phase(Phase::TaskLocal)
            .filter(|r| r.part_of.is_none())
            .collect();
        let names: Vec<&str> = TASK_REWRITES.iter().map(|r| r.name).collect();
        let listed_names: Vec<&str> = listed.iter().map(|r| r.name).collect();
        assert_eq!(names, listed_names);
        for (rewrite, entry) in TASK_REWRITES.iter().zip(&listed) {
            let mut options = SquadronOptions::default();
            assert_eq!((rewrite.is_on)(&options), entry.is_on(&options));
            let setting = entry.setting().expect("a task rewrite has a setting");
            use datafusion::common::config::ExtensionOptions;
            let key = setting.trim_start_matches("squadron.");
            options.set(key, "false").unwrap();
            assert!(!(rewrite.is_on)(&options), "{setting} = false leaves it on");
            assert!(!entry.is_on(&options));
        }
    }
}
