//! Squadron's own session settings, `squadron.*`: a DataFusion config
//! extension, so `SET squadron.coordinator_scan_limit = 0` works per
//! session like DataFusion's settings, shows in `SHOW ALL`, and travels
//! with the query's tasks (workers register the extension to accept them).
//! The server's flags set their defaults.

use std::any::Any;

use datafusion::common::config::{
    ConfigEntry, ConfigExtension, ConfigField, ConfigOptions, ExtensionOptions,
};
use datafusion::common::{DataFusionError, Result};
use datafusion::prelude::SessionConfig;

/// The default of `squadron.coordinator_scan_limit` (`--coordinator-scan-limit`):
/// a few row groups of a typical table (Squadron writes 16,384 rows per row
/// group; TPC-H `customer`'s are 1.4 MB each).
pub const DEFAULT_COORDINATOR_SCAN_LIMIT: u64 = 4 << 20;

/// Where Squadron runs a statement, per session. (Written out rather than
/// with DataFusion's `extensions_options!`, whose entries lack the
/// `squadron.` prefix: `SHOW squadron.…` and `information_schema.df_settings`
/// would not find them.)
#[derive(Debug, Clone)]
pub struct SquadronOptions {
    /// See `COORDINATOR_SCAN_LIMIT`.
    pub coordinator_scan_limit: u64,
    /// See `REUSE_PLANS`.
    pub reuse_plans: bool,
    /// See `SUBSET_KEY_MAX_ROWS`.
    pub subset_key_max_rows: u64,
    /// See `RETRY_POLICY`.
    pub retry_policy: RetryPolicy,
    /// See `DYNAMIC_FILTERS`.
    pub dynamic_filters: bool,
    /// See `BLOOM_FILTERS`.
    pub bloom_filters: bool,
    /// See `JOIN_REORDER`.
    pub join_reorder: bool,
    /// See `JOIN_REORDER_SAMPLES`.
    pub join_reorder_samples: bool,
    /// See `KEY_RANGE_SPLITS`.
    pub key_range_splits: bool,
    /// See `NARROW_DECIMALS`.
    pub narrow_decimals: bool,
    /// See `ADAPTIVE_FILTERS`.
    pub adaptive_filters: bool,
    /// See `LIKE_SUBSTRINGS`.
    pub like_substrings: bool,
    /// See `SHARED_SHUFFLES`.
    pub shared_shuffles: bool,
    /// See `REDUCED_SHUFFLES`.
    pub reduced_shuffles: bool,
    /// See `SCAN_RANGE_PRUNING`.
    pub scan_range_pruning: bool,
    /// See `ONE_PARTITION_TAILS`.
    pub one_partition_tails: bool,
    /// See `NAN_SAFE_PRUNING`.
    pub nan_safe_pruning: bool,
}

/// What survives a lost worker (`squadron.retry_policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetryPolicy {
    /// The job runs again from the start while no row reached the client;
    /// exchange outputs stream through memory only (the fast default).
    #[default]
    Query,
    /// Fault-tolerant: exchange outputs are retained (spilled to disk past
    /// memory) until the job ends, only the tasks whose outputs were lost
    /// run again, and the client's rows are committed per final task, so a
    /// lost worker costs neither the work done elsewhere nor the rows sent.
    Task,
}

impl RetryPolicy {
    pub fn name(self) -> &'static str {
        match self {
            Self::Query => "query",
            Self::Task => "task",
        }
    }
}

impl std::str::FromStr for RetryPolicy {
    type Err = DataFusionError;

    fn from_str(value: &str) -> Result<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "query" => Ok(Self::Query),
            "task" => Ok(Self::Task),
            other => Err(DataFusionError::Configuration(format!(
                "squadron.retry_policy is 'query' or 'task', not {other:?}"
            ))),
        }
    }
}

/// The default of `squadron.subset_key_max_rows`: TPC-H q16 at SF1 reads
/// about 1 M rows below its folded shuffle.
pub const DEFAULT_SUBSET_KEY_MAX_ROWS: u64 = 8_000_000;

const COORDINATOR_SCAN_LIMIT: (&str, &str) = (
    "coordinator_scan_limit",
    "Queries whose table reads are Parquet row groups of at most this many bytes in all \
     run on the coordinator rather than on the workers; 0 sends every table read to the \
     workers (--coordinator-scan-limit)",
);
const REUSE_PLANS: (&str, &str) = (
    "reuse_plans",
    "Whether a statement that differs from an earlier one of the session only in its \
     constants re-uses that statement's plan (--reuse-plans)",
);
const SUBSET_KEY_MAX_ROWS: (&str, &str) = (
    "subset_key_max_rows",
    "Most rows (by table statistics) a plan may read below a hash shuffle for a shuffle \
     above it on a subset of its keys to be folded into it (one stage less); 0 never folds",
);

const RETRY_POLICY: (&str, &str) = (
    "retry_policy",
    "What a lost worker costs: 'query' runs the job again while no row reached the client \
     (fastest when nothing fails); 'task' retains exchange outputs and runs only the lost \
     tasks again, and results survive the failure (--retry-policy)",
);

const DYNAMIC_FILTERS: (&str, &str) = (
    "dynamic_filters",
    "Whether a task's hash joins, once their build side is complete, prune the scans of \
     their probe side in the same task, and TopK thresholds the scans below them \
     (--dynamic-filters)",
);

const BLOOM_FILTERS: (&str, &str) = (
    "bloom_filters",
    "Whether a join's dynamic filter over rows read from other stages also holds a Bloom \
     filter of its build keys when they are too many to list, which the producing tasks \
     apply before sending (saves network, costs a cache miss per row: off by default)",
);

const JOIN_REORDER: (&str, &str) = (
    "join_reorder",
    "Whether inner joins are put in the order their tables' statistics (Parquet row counts \
     and key ranges, narrowed by filters) say makes the fewest intermediate rows, rather \
     than the order the query lists them (EXPLAIN shows both)",
);

const JOIN_REORDER_SAMPLES: (&str, &str) = (
    "join_reorder_samples",
    "Whether the join order weighs a filter its table's statistics cannot (LIKE, one column \
     against another, a string's equality) by evaluating it on a sample of the table's rows \
     (a few ranges, read while planning: ~15-30 ms per query at SF10). Off by default: the \
     estimates are close, but the orders the row-count model chose from them were not \
     faster at TPC-H SF10 (q21 slower)",
);

const KEY_RANGE_SPLITS: (&str, &str) = (
    "key_range_splits",
    "Whether a partitioned join or aggregate on a key whose Parquet row groups hold narrow, \
     ordered ranges of it (files written in key order) splits its inputs by key range, each \
     task reading its range of every table, instead of shuffling them",
);

const NARROW_DECIMALS: (&str, &str) = (
    "narrow_decimals",
    "Whether a task computes decimal +, - and * in 64 bits for the batches whose values \
     keep every result within 64 bits (the same values, without a 128-bit overflow check \
     per row), rather than always as Arrow does",
);

const ADAPTIVE_FILTERS: (&str, &str) = (
    "adaptive_filters",
    "Whether a task evaluates the terms of a filter (a AND b AND ...; comparisons, IN, LIKE, \
     null tests) in the order its batches show is cheapest, each on the rows the terms before \
     it kept, rather than in the order the query wrote them (EXPLAIN ANALYZE shows the order \
     settled on)",
);

const LIKE_SUBSTRINGS: (&str, &str) = (
    "like_substrings",
    "Whether a task's filters match a LIKE pattern of several literals separated by % \
     ('%special%requests%') by searching the literals in order, rather than by the regular \
     expression Arrow builds for it",
);

const SHARED_SHUFFLES: (&str, &str) = (
    "shared_shuffles",
    "Whether a shuffle of a subtree the plan holds twice (a CTE or view used twice) is \
     computed once and read by both uses, rather than once per use (never for a subtree \
     with a volatile function such as random())",
);

const REDUCED_SHUFFLES: (&str, &str) = (
    "reduced_shuffles",
    "Whether a selective build side of a broadcast join first drops, below the shuffles \
     under its join, the rows whose keys it lacks (never for a build side with a volatile \
     function such as random())",
);

const SCAN_RANGE_PRUNING: (&str, &str) = (
    "scan_range_pruning",
    "Whether the coordinator drops, from each task's file ranges, the Parquet row groups \
     whose statistics rule out the query's filters (by the footers it holds), so tasks are \
     not sent ranges that hold no row",
);

const NAN_SAFE_PRUNING: (&str, &str) = (
    "nan_safe_pruning",
    "Whether a comparison of a float column with a constant that NaN satisfies (all but =) \
     is kept from pruning Parquet files, row groups and pages: their statistics leave NaN \
     out, so pruning by them skips NaN rows the comparison keeps. Off only for data known \
     to hold no NaN",
);

const ONE_PARTITION_TAILS: (&str, &str) = (
    "one_partition_tails",
    "Whether the operators above a one-partition input (a join with a scalar subquery, a \
     small table) on the way to the result run in that one task, rather than after a \
     shuffle to the session's target partitions",
);

impl Default for SquadronOptions {
    fn default() -> Self {
        Self {
            coordinator_scan_limit: DEFAULT_COORDINATOR_SCAN_LIMIT,
            reuse_plans: true,
            subset_key_max_rows: DEFAULT_SUBSET_KEY_MAX_ROWS,
            retry_policy: RetryPolicy::default(),
            dynamic_filters: true,
            bloom_filters: false,
            join_reorder: true,
            join_reorder_samples: false,
            key_range_splits: true,
            narrow_decimals: true,
            adaptive_filters: true,
            like_substrings: true,
            shared_shuffles: true,
            reduced_shuffles: true,
            scan_range_pruning: true,
            nan_safe_pruning: true,
            one_partition_tails: true,
        }
    }
}

impl ExtensionOptions for SquadronOptions {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn cloned(&self) -> Box<dyn ExtensionOptions> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        match key {
            k if k == COORDINATOR_SCAN_LIMIT.0 => self.coordinator_scan_limit.set(k, value),
            k if k == REUSE_PLANS.0 => self.reuse_plans.set(k, value),
            k if k == SUBSET_KEY_MAX_ROWS.0 => self.subset_key_max_rows.set(k, value),
            k if k == DYNAMIC_FILTERS.0 => self.dynamic_filters.set(k, value),
            k if k == BLOOM_FILTERS.0 => self.bloom_filters.set(k, value),
            k if k == JOIN_REORDER.0 => self.join_reorder.set(k, value),
            k if k == JOIN_REORDER_SAMPLES.0 => self.join_reorder_samples.set(k, value),
            k if k == KEY_RANGE_SPLITS.0 => self.key_range_splits.set(k, value),
            k if k == NARROW_DECIMALS.0 => self.narrow_decimals.set(k, value),
            k if k == ADAPTIVE_FILTERS.0 => self.adaptive_filters.set(k, value),
            k if k == LIKE_SUBSTRINGS.0 => self.like_substrings.set(k, value),
            k if k == SHARED_SHUFFLES.0 => self.shared_shuffles.set(k, value),
            k if k == REDUCED_SHUFFLES.0 => self.reduced_shuffles.set(k, value),
            k if k == SCAN_RANGE_PRUNING.0 => self.scan_range_pruning.set(k, value),
            k if k == ONE_PARTITION_TAILS.0 => self.one_partition_tails.set(k, value),
            k if k == NAN_SAFE_PRUNING.0 => self.nan_safe_pruning.set(k, value),
            k if k == RETRY_POLICY.0 => {
                self.retry_policy = value.parse()?;
                Ok(())
            }
            _ => Err(DataFusionError::Configuration(format!(
                "no setting {}.{key}; Squadron's are {}",
                Self::PREFIX,
                self.entries()
                    .iter()
                    .map(|entry| entry.key.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    fn entries(&self) -> Vec<ConfigEntry> {
        let entry = |(key, description): (&str, &'static str), value: String| ConfigEntry {
            key: format!("{}.{key}", Self::PREFIX),
            value: Some(value),
            description,
        };
        vec![
            entry(
                COORDINATOR_SCAN_LIMIT,
                self.coordinator_scan_limit.to_string(),
            ),
            entry(REUSE_PLANS, self.reuse_plans.to_string()),
            entry(SUBSET_KEY_MAX_ROWS, self.subset_key_max_rows.to_string()),
            entry(RETRY_POLICY, self.retry_policy.name().to_string()),
            entry(DYNAMIC_FILTERS, self.dynamic_filters.to_string()),
            entry(BLOOM_FILTERS, self.bloom_filters.to_string()),
            entry(JOIN_REORDER, self.join_reorder.to_string()),
            entry(JOIN_REORDER_SAMPLES, self.join_reorder_samples.to_string()),
            entry(KEY_RANGE_SPLITS, self.key_range_splits.to_string()),
            entry(NARROW_DECIMALS, self.narrow_decimals.to_string()),
            entry(ADAPTIVE_FILTERS, self.adaptive_filters.to_string()),
            entry(LIKE_SUBSTRINGS, self.like_substrings.to_string()),
            entry(SHARED_SHUFFLES, self.shared_shuffles.to_string()),
            entry(REDUCED_SHUFFLES, self.reduced_shuffles.to_string()),
            entry(SCAN_RANGE_PRUNING, self.scan_range_pruning.to_string()),
            entry(ONE_PARTITION_TAILS, self.one_partition_tails.to_string()),
            entry(NAN_SAFE_PRUNING, self.nan_safe_pruning.to_string()),
        ]
    }
}

impl ConfigExtension for SquadronOptions {
    const PREFIX: &'static str = "squadron";
}

impl SquadronOptions {
    /// The settings in `options`; the defaults where the extension is not
    /// registered.
    pub fn of(options: &ConfigOptions) -> Self {
        options
            .extensions
            .get::<SquadronOptions>()
            .cloned()
            .unwrap_or_default()
    }
}

/// `config` with Squadron's settings registered, at `defaults`.
pub fn with_squadron_options(config: SessionConfig, defaults: SquadronOptions) -> SessionConfig {
    config.with_option_extension(defaults)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_set_by_key_and_read_back() {
        let config = with_squadron_options(SessionConfig::new(), SquadronOptions::default());
        let mut options = config.options().as_ref().clone();
        assert_eq!(
            SquadronOptions::of(&options).coordinator_scan_limit,
            4 << 20
        );
        options.set("squadron.coordinator_scan_limit", "0").unwrap();
        options.set("squadron.reuse_plans", "false").unwrap();
        options.set("squadron.subset_key_max_rows", "12").unwrap();
        options.set("squadron.dynamic_filters", "false").unwrap();
        options.set("squadron.shared_shuffles", "false").unwrap();
        options.set("squadron.reduced_shuffles", "false").unwrap();
        let read = SquadronOptions::of(&options);
        assert!(!read.shared_shuffles && !read.reduced_shuffles);
        assert_eq!(read.coordinator_scan_limit, 0);
        assert!(!read.reuse_plans);
        assert_eq!(read.subset_key_max_rows, 12);
        assert!(!read.dynamic_filters);
        options.set("squadron.retry_policy", "TASK").unwrap();
        assert_eq!(
            SquadronOptions::of(&options).retry_policy,
            RetryPolicy::Task
        );
        let err = options.set("squadron.retry_policy", "stage").unwrap_err();
        assert!(err.to_string().contains("'query' or 'task'"), "{err}");
        let err = options.set("squadron.no_such_setting", "1").unwrap_err();
        assert!(err.to_string().contains("no_such_setting"), "{err}");
        assert!(
            err.to_string().contains("squadron.subset_key_max_rows"),
            "{err}"
        );
        assert!(options
            .entries()
            .iter()
            .any(|e| e.key == "squadron.coordinator_scan_limit"));
    }
}
