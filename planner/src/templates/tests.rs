//! A template's plan for new constants is the plan DataFusion makes for
//! them, and gives the same answer.

use std::sync::Arc;

use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::physical_plan::{collect, displayable, ExecutionPlan};
use datafusion::prelude::{SessionConfig, SessionContext};

use super::*;
use crate::test_tables::{physical_plan, sorted_lines, sorted_table};
use crate::{prune_scan_ranges, without_scan_range_pruning};

/// A planning context (Squadron's rules) over `t` (`k` 1..=8000 sorted,
/// `v = 2k`) and `u` (`i` Int32, `s` text, `k`).
async fn context(dir: &std::path::Path) -> SessionContext {
    let config = SessionConfig::new().with_target_partitions(2);
    let ctx = crate::context::planning_context(config, Arc::new(RuntimeEnv::default()));
    sorted_table(&ctx, dir).await;
    let file = dir.join("u.parquet");
    for sql in [
        format!(
            "COPY (SELECT CAST(value AS INT) AS i, 'name ' || value AS s, value AS k \
             FROM generate_series(1, 3000)) TO '{}' STORED AS PARQUET",
            file.display()
        ),
        format!(
            "CREATE EXTERNAL TABLE u STORED AS PARQUET LOCATION '{}'",
            file.display()
        ),
    ] {
        run(&ctx, &sql).await;
    }
    ctx
}

/// Runs a statement that changes the context.
async fn run(ctx: &SessionContext, sql: &str) {
    ctx.sql(sql).await.unwrap().collect().await.unwrap();
}

/// The template `sql` makes, if it qualifies.
async fn capture(ctx: &SessionContext, sql: &str) -> Option<Template> {
    let state = ctx.state();
    let key = StatementKey::of(&state, sql)?;
    let logical = state.create_logical_plan(sql).await.unwrap();
    let table = Template::table_of(&logical, &key.values)?;
    let plan = without_scan_range_pruning(&state)
        .create_physical_plan(&logical)
        .await
        .unwrap();
    Template::capture(&state, plan, table, key.values)
        .await
        .unwrap()
}

/// `sql` planned from `template`, pruned as planning would.
async fn instantiate(ctx: &SessionContext, template: &Template, sql: &str) -> Instance {
    let state = ctx.state();
    let key = StatementKey::of(&state, sql).unwrap();
    match template
        .instantiate(ctx, &state, &key.values)
        .await
        .unwrap()
    {
        Instance::Plan(plan) => Instance::Plan(prune_scan_ranges(&state, plan).unwrap()),
        other => other,
    }
}

fn shown(plan: &Arc<dyn ExecutionPlan>) -> String {
    displayable(plan.as_ref()).indent(true).to_string()
}

/// Plans `first`, then each of `next` from its template, and checks the
/// plan and the answer against planning it afresh.
async fn assert_reused_as_planned(ctx: &SessionContext, first: &str, next: &[String]) {
    let template = capture(ctx, first)
        .await
        .unwrap_or_else(|| panic!("{first}: no template"));
    for sql in next {
        let Instance::Plan(reused) = instantiate(ctx, &template, sql).await else {
            panic!("{sql}: not re-used");
        };
        let fresh = physical_plan(ctx, sql).await;
        assert_eq!(shown(&reused), shown(&fresh), "{sql}");
        let task = ctx.task_ctx();
        let answer = sorted_lines(&collect(reused, Arc::clone(&task)).await.unwrap());
        assert_eq!(
            answer,
            sorted_lines(&collect(fresh, task).await.unwrap()),
            "{sql}"
        );
    }
}

#[tokio::test]
async fn lookups_by_other_keys_are_planned_as_datafusion_plans_them() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path()).await;
    let keys = [1, 999, 1000, 1001, 4321, 8000, 0, 9000, 123456789];
    let lookups: Vec<String> = keys
        .iter()
        .map(|k| format!("SELECT v FROM t WHERE k = {k}"))
        .collect();
    assert_reused_as_planned(&ctx, "SELECT v FROM t WHERE k = 42", &lookups).await;
    let ranges: Vec<String> = keys
        .iter()
        .map(|k| format!("SELECT * FROM t WHERE k >= {k} AND v < {}", 2 * k + 50))
        .collect();
    assert_reused_as_planned(&ctx, "SELECT * FROM t WHERE k >= 10 AND v < 70", &ranges).await;
    // A narrower column and a text one, their literals converted.
    let narrow: Vec<String> = [1, 2999, 70000]
        .iter()
        .map(|i| format!("SELECT k, s FROM u WHERE i = {i}"))
        .collect();
    assert_reused_as_planned(&ctx, "SELECT k, s FROM u WHERE i = 5", &narrow).await;
    let names: Vec<String> = ["name 17", "name 2999", "it's", "", "名前"]
        .iter()
        .map(|s| format!("SELECT k FROM u WHERE s = '{}'", s.replace('\'', "''")))
        .collect();
    assert_reused_as_planned(&ctx, "SELECT k FROM u WHERE s = 'name 5'", &names).await;
}

#[tokio::test]
async fn values_that_do_not_convert_exactly_are_planned_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path()).await;
    let narrow = capture(&ctx, "SELECT k FROM u WHERE i = 5").await.unwrap();
    // Beyond Int32: DataFusion keeps a cast on the column instead.
    let beyond = instantiate(&ctx, &narrow, "SELECT k FROM u WHERE i = 3000000000").await;
    assert!(matches!(beyond, Instance::Inexact));
    // Text compared with a number: '05' and 'x' are not 5 and 'x' written
    // back, so they are not swapped in.
    let text = capture(&ctx, "SELECT v FROM t WHERE k = '7'")
        .await
        .unwrap();
    for sql in [
        "SELECT v FROM t WHERE k = '05'",
        "SELECT v FROM t WHERE k = 'x'",
    ] {
        assert!(
            matches!(instantiate(&ctx, &text, sql).await, Instance::Inexact),
            "{sql}"
        );
    }
    assert_reused_as_planned(
        &ctx,
        "SELECT v FROM t WHERE k = '7'",
        &["SELECT v FROM t WHERE k = '4000'".to_string()],
    )
    .await;
}

#[tokio::test]
async fn only_filtered_reads_of_one_table_qualify() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path()).await;
    for sql in [
        "SELECT k FROM t WHERE k = 5 ORDER BY v",
        "SELECT k FROM t WHERE k = 5 LIMIT 3",
        "SELECT count(*) FROM t WHERE k > 5",
        "SELECT k, 5 FROM t WHERE v = 6",
        "SELECT k FROM t WHERE k + 1 = 5",
        "SELECT k FROM t WHERE k > 5 AND k < 9",
        "SELECT k FROM t WHERE k = 5 OR v = 8",
        "SELECT a.k FROM t a JOIN u b ON a.k = b.k WHERE a.v = 4",
        "SELECT k FROM t WHERE k IN (SELECT k FROM u WHERE i = 3)",
        "SELECT k FROM t WHERE k = -5",
        // Two constants that stand for the same value: which is which?
        "SELECT k FROM t WHERE k = 5 AND v = 5",
        "SELECT value FROM generate_series(1, 10) WHERE value = 3",
    ] {
        assert!(capture(&ctx, sql).await.is_none(), "{sql}");
    }
}

#[tokio::test]
async fn a_template_goes_stale_when_its_table_or_files_change() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path()).await;
    let table_dir = dir.path().join("w");
    std::fs::create_dir(&table_dir).unwrap();
    let write = |name: &str, from: u64| {
        format!(
            "COPY (SELECT value AS k FROM generate_series({from}, {}) ) TO '{}' STORED AS PARQUET",
            from + 9,
            table_dir.join(name).display()
        )
    };
    run(&ctx, &write("a.parquet", 1)).await;
    let create = format!(
        "CREATE EXTERNAL TABLE w STORED AS PARQUET LOCATION '{}/'",
        table_dir.display()
    );
    run(&ctx, &create).await;
    let template = capture(&ctx, "SELECT k FROM w WHERE k > 3").await.unwrap();
    let next = "SELECT k FROM w WHERE k > 5";
    assert!(matches!(
        instantiate(&ctx, &template, next).await,
        Instance::Plan(_)
    ));
    // A file more in the table's directory, its listing forgotten (as
    // Squadron's writes do: DataFusion caches listings until then, and
    // a template sees the files planning would).
    run(&ctx, &write("b.parquet", 100)).await;
    assert!(matches!(
        instantiate(&ctx, &template, next).await,
        Instance::Plan(_)
    ));
    let listings = ctx
        .runtime_env()
        .cache_manager
        .get_list_files_cache()
        .unwrap();
    for listed in listings.list_entries().into_keys() {
        listings.remove(&listed);
    }
    assert!(matches!(
        instantiate(&ctx, &template, next).await,
        Instance::Stale
    ));
    // The table defined again over the same files.
    let fresh = capture(&ctx, "SELECT k FROM w WHERE k > 3").await.unwrap();
    ctx.deregister_table("w").unwrap();
    run(&ctx, &create).await;
    assert!(matches!(
        instantiate(&ctx, &fresh, next).await,
        Instance::Stale
    ));
    // Gone: planned afresh, which reports it.
    ctx.deregister_table("w").unwrap();
    assert!(matches!(
        instantiate(&ctx, &fresh, next).await,
        Instance::Stale
    ));
}

#[tokio::test]
async fn a_session_keeps_few_templates_and_none_made_before_a_change() {
    let mut templates = Templates::default();
    for i in 0..TEMPLATES_PER_SESSION + 10 {
        templates.insert(format!("shape {i}"), None, templates.generation());
    }
    assert_eq!(templates.len(), TEMPLATES_PER_SESSION);
    assert!(templates.get("shape 0").is_none(), "oldest dropped");
    assert!(templates
        .get(&format!("shape {}", TEMPLATES_PER_SESSION + 9))
        .is_some());
    let before = templates.generation();
    templates.clear();
    templates.insert("planned before".into(), None, before);
    assert!(templates.is_empty());
}

#[tokio::test]
async fn runs_of_a_template_do_not_add_to_one_another_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path()).await;
    let template = capture(&ctx, "SELECT v FROM t WHERE k = 42").await.unwrap();
    let mut counts = vec![];
    for k in [1, 2, 3] {
        let sql = format!("SELECT v FROM t WHERE k = {k}");
        let Instance::Plan(plan) = instantiate(&ctx, &template, &sql).await else {
            panic!("{sql}: not re-used");
        };
        collect(Arc::clone(&plan), ctx.task_ctx()).await.unwrap();
        let mut scan = Arc::clone(&plan);
        while let Some(child) = scan.children().first().map(|c| Arc::clone(c)) {
            scan = child;
        }
        counts.push(scan.metrics().map_or(0, |m| m.iter().count()));
    }
    assert!(counts[0] > 0, "the scan records metrics");
    assert!(counts.iter().all(|c| *c == counts[0]), "{counts:?}");
}
