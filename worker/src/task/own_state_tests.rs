use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{JoinType, NullEquality, Result};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::{
    collect_partitioned, common, ExecutionPlan, ExecutionPlanProperties,
};

use super::own_state_where_run_again;

/// One partition per entry of `partitions`, each of one batch of column
/// `name`'s values.
fn rows(name: &str, partitions: &[&[Option<i64>]]) -> Arc<dyn ExecutionPlan> {
    let schema = Arc::new(Schema::new(vec![Field::new(name, DataType::Int64, true)]));
    let batches: Vec<Vec<RecordBatch>> = partitions
        .iter()
        .map(|values| {
            let column = Arc::new(Int64Array::from(values.to_vec()));
            vec![RecordBatch::try_new(Arc::clone(&schema), vec![column]).unwrap()]
        })
        .collect();
    MemorySourceConfig::try_new_exec(&batches, schema, None).unwrap()
}

fn join(
    build: Arc<dyn ExecutionPlan>,
    probe: Arc<dyn ExecutionPlan>,
    join_type: JoinType,
) -> Arc<dyn ExecutionPlan> {
    let on = vec![(
        Arc::new(Column::new(&build.schema().field(0).name().clone(), 0)) as _,
        Arc::new(Column::new(&probe.schema().field(0).name().clone(), 0)) as _,
    )];
    Arc::new(
        HashJoinExec::try_new(
            build,
            probe,
            on,
            None,
            &join_type,
            Some(vec![0]),
            PartitionMode::CollectLeft,
            NullEquality::NullEqualsNothing,
            false,
        )
        .unwrap(),
    )
}

/// A stage's plan: key 19, kept by a full join that matches none of it,
/// joined (broadcast) with three probe partitions of which the last holds
/// 19.
fn stage_plan() -> Arc<dyn ExecutionPlan> {
    let full = join(
        rows("a", &[&[Some(19)]]),
        rows("b", &[&[Some(165), Some(79)]]),
        JoinType::Full,
    );
    join(
        full,
        rows("c", &[&[Some(1)], &[Some(2)], &[Some(19)]]),
        JoinType::Inner,
    )
}

/// The rows of each task of `decoded`'s stage run one after the other,
/// each executing its own partition of its copy of the plan: `copy` makes
/// it from the shared plan as the task's bindings and rewrites would.
async fn rows_of_tasks(
    decoded: &Arc<dyn ExecutionPlan>,
    copy: impl Fn(&Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>>,
) -> usize {
    let mut found = 0;
    for partition in 0..decoded.output_partitioning().partition_count() {
        let task_plan = copy(decoded).unwrap();
        let stream = task_plan
            .execute(partition, Arc::new(TaskContext::default()))
            .unwrap();
        let batches = common::collect(stream).await.unwrap();
        found += batches.iter().map(RecordBatch::num_rows).sum::<usize>();
    }
    found
}

#[tokio::test]
async fn tasks_copying_a_broadcast_join_each_run_its_build_side_afresh() {
    let decoded = stage_plan();
    let expected: usize =
        collect_partitioned(Arc::clone(&decoded), Arc::new(TaskContext::default()))
            .await
            .unwrap()
            .iter()
            .flatten()
            .map(RecordBatch::num_rows)
            .sum();
    assert_eq!(expected, 1, "the plan run once, as one process runs it");

    // Each task's own copy of the broadcast join (as a task's dynamic
    // filter makes it) over the shared full join.
    let copied = |plan: &Arc<dyn ExecutionPlan>| Arc::clone(plan).reset_state();
    let lost = rows_of_tasks(&stage_plan(), copied).await;
    assert_eq!(
        lost, 0,
        "the full join's unmatched row went to the first task only"
    );

    let decoded = stage_plan();
    let own = rows_of_tasks(&decoded, |plan| {
        own_state_where_run_again(copied(plan)?, plan)
    })
    .await;
    assert_eq!(own, expected);
}

#[tokio::test]
async fn what_a_task_runs_for_its_own_partition_stays_shared() {
    let decoded = stage_plan();
    let task_plan =
        own_state_where_run_again(Arc::clone(&decoded).reset_state().unwrap(), &decoded).unwrap();
    let (shared_build, shared_probe) = (decoded.children()[0], decoded.children()[1]);
    let (build, probe) = (task_plan.children()[0], task_plan.children()[1]);
    assert!(
        Arc::ptr_eq(probe, shared_probe),
        "the probe side runs partition-wise"
    );
    assert!(
        !Arc::ptr_eq(build, shared_build),
        "the build side runs in every task"
    );

    // A plan no task copied is left as it is.
    let untouched = own_state_where_run_again(Arc::clone(&decoded), &decoded).unwrap();
    assert!(Arc::ptr_eq(&untouched, &decoded));
}

/// A task's copy as a dynamic filter wired below the full join makes it:
/// the broadcast join rebuilt afresh over a copy of the full join whose
/// probe side changed, made through `with_new_children`, which keeps the
/// full join's build state shared with the original's.
#[allow(deprecated)] // the rebuild tree rewrites make, which this copies
fn copied_through_the_full_join(plan: &Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let (full, probe) = (plan.children()[0], plan.children()[1]);
    let (full_build, full_probe) = (full.children()[0], full.children()[1]);
    let full = Arc::clone(full).with_new_children(vec![
        Arc::clone(full_build),
        Arc::clone(full_probe).reset_state()?,
    ])?;
    Arc::clone(plan)
        .reset_state()?
        .with_new_children(vec![full, Arc::clone(probe)])
}

#[tokio::test]
async fn a_tasks_own_copy_below_a_broadcast_build_side_runs_on_its_own_state() {
    let lost = rows_of_tasks(&stage_plan(), copied_through_the_full_join).await;
    assert_eq!(
        lost, 0,
        "the copies shared the full join's count of finished partitions"
    );

    let own = rows_of_tasks(&stage_plan(), |plan| {
        own_state_where_run_again(copied_through_the_full_join(plan)?, plan)
    })
    .await;
    assert_eq!(own, 1, "each task's build side kept the unmatched row");
}
