//! File statistics as bounds on the coordinator too.
//!
//! The planner takes exact file statistics for facts about the data: a
//! column whose min equals its max becomes a constant of the plan's
//! equivalences, and `max(x)` is answered from the statistics without a
//! scan. That goes wrong on Parquet files, which single-node DataFusion
//! over in-memory tables never meets: Parquet leaves NaN out of float
//! min/max, so `max(x)` over a column with NaN answered the largest number
//! instead of NaN.
//!
//! This rule runs first among the physical optimizer rules: each file scan's
//! statistics (and those of its files) are made inexact where they would
//! stand in for data (`file_bounds`, which workers apply too), and the
//! operators above are rebuilt on them.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::datasource::physical_plan::{FileScanConfig, FileScanConfigBuilder};
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use squadron_exec::plan::file_bounds::{as_bounds, bounds_not_values};

#[derive(Debug, Default)]
pub struct FileStatisticsAsBounds;

impl PhysicalOptimizerRule for FileStatisticsAsBounds {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(config) = node
                .downcast_ref::<DataSourceExec>()
                .and_then(|scan| scan.data_source().downcast_ref::<FileScanConfig>())
            else {
                return Ok(Transformed::no(node));
            };
            let Some(table) = as_bounds(&config.statistics()) else {
                return Ok(Transformed::no(node));
            };
            let mut config = config.clone();
            config.file_groups = bounds_not_values(std::mem::take(&mut config.file_groups));
            let config = FileScanConfigBuilder::from(config)
                .with_statistics(table)
                .build();
            Ok(Transformed::yes(
                DataSourceExec::from_data_source(config) as Arc<dyn ExecutionPlan>
            ))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "file_statistics_as_bounds"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
