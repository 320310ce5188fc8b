//! The ways Squadron runs a query, each a session's settings: every
//! generated query runs in each of them.

/// Every rewrite Squadron applies for speed, by its switch and the value
/// that turns it off: the
/// `rewrites-off` mode turns them all off, so a difference seen in another
/// mode but not there points at a rewrite.
pub const REWRITES: &[(&str, &str)] = &[
    ("squadron.join_reorder", "false"),
    ("squadron.dynamic_filters", "false"),
    ("squadron.key_range_splits", "false"),
    ("squadron.narrow_decimals", "false"),
    ("squadron.adaptive_filters", "false"),
    ("squadron.like_substrings", "false"),
    ("squadron.shared_shuffles", "false"),
    ("squadron.reduced_shuffles", "false"),
    ("squadron.reuse_plans", "false"),
    ("squadron.scan_range_pruning", "false"),
    ("squadron.one_partition_tails", "false"),
    ("squadron.subset_key_max_rows", "0"),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// The shipped settings (small reads run on the coordinator).
    Default,
    /// Every table read on the workers.
    Workers,
    /// No broadcast joins: every equi-join's inputs are shuffled.
    Partitioned,
    /// Partitioned joins whose filters also send Bloom filters.
    Bloom,
    /// Fault-tolerant execution: outputs retained, tasks retried alone.
    TaskRetry,
    /// On the workers with every rewrite off.
    RewritesOff,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Default => "default",
            Mode::Workers => "workers",
            Mode::Partitioned => "partitioned",
            Mode::Bloom => "bloom",
            Mode::TaskRetry => "task-retry",
            Mode::RewritesOff => "rewrites-off",
        }
    }

    /// The `SET` statements that put a session in this mode.
    pub fn settings(self) -> Vec<String> {
        let workers = "SET squadron.coordinator_scan_limit = 0".to_string();
        let partitioned = [
            "SET datafusion.optimizer.hash_join_single_partition_threshold = 0",
            "SET datafusion.optimizer.hash_join_single_partition_threshold_rows = 0",
        ]
        .map(str::to_string);
        match self {
            Mode::Default => vec![],
            Mode::Workers => vec![workers],
            Mode::Partitioned => [workers].into_iter().chain(partitioned).collect(),
            Mode::Bloom => [workers, "SET squadron.bloom_filters = true".into()]
                .into_iter()
                .chain(partitioned)
                .collect(),
            Mode::TaskRetry => vec![workers, "SET squadron.retry_policy = 'task'".into()],
            Mode::RewritesOff => [workers]
                .into_iter()
                .chain(
                    REWRITES
                        .iter()
                        .map(|(key, off)| format!("SET {key} = {off}")),
                )
                .collect(),
        }
    }
}
