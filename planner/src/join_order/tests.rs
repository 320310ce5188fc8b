//! Joins put in their cheapest order give the answers of the written
//! order, and EXPLAIN's decision names the order taken.

use std::sync::Arc;

use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::physical_plan::displayable;
use datafusion::prelude::SessionContext;
use squadron_exec::squadron_options::{with_squadron_options, SquadronOptions};

use super::describe;
use crate::test_tables::{physical_plan, sorted_lines};

/// A snowflake in Parquet: `fact` (20,000 rows, `f_dim` 1..1000), `dim`
/// (1,000 rows, `d_group` 1..50), `grp` (50 rows, `g_name` 'g1'..'g50'),
/// and `other` (10 rows) that no equality links to them.
async fn snowflake(dir: &std::path::Path, join_reorder: bool) -> SessionContext {
    let tables = [
        (
            "fact",
            "SELECT value AS f_id, value % 1000 + 1 AS f_dim, value % 97 AS f_amount \
             FROM generate_series(1, 20000)",
        ),
        (
            "dim",
            "SELECT value AS d_id, value % 50 + 1 AS d_group FROM generate_series(1, 1000)",
        ),
        (
            "grp",
            "SELECT value AS g_id, 'g' || value AS g_name FROM generate_series(1, 50)",
        ),
        ("other", "SELECT value AS o_id FROM generate_series(1, 10)"),
    ];
    parquet_tables(dir, join_reorder, &tables).await
}

/// A planning context over one Parquet file in `dir` per `(name, rows)`.
async fn parquet_tables(
    dir: &std::path::Path,
    join_reorder: bool,
    tables: &[(&str, &str)],
) -> SessionContext {
    let options = SquadronOptions {
        join_reorder,
        join_reorder_samples: true,
        ..SquadronOptions::default()
    };
    let config = with_squadron_options(crate::context::coordinator_session_config(2), options);
    let ctx = crate::context::planning_context(config, Arc::new(RuntimeEnv::default()));
    for (name, rows) in tables {
        let file = dir.join(format!("{name}.parquet"));
        for sql in [
            format!("COPY ({rows}) TO '{}' STORED AS PARQUET", file.display()),
            format!(
                "CREATE EXTERNAL TABLE {name} STORED AS PARQUET LOCATION '{}'",
                file.display()
            ),
        ] {
            ctx.sql(&sql).await.unwrap().collect().await.unwrap();
        }
    }
    ctx
}

const SNOWFLAKE: &str = "SELECT g_name, sum(f_amount) AS amount, count(*) AS n \
     FROM fact, dim, grp \
     WHERE f_dim = d_id AND d_group = g_id AND g_name = 'g7' AND f_amount > d_group \
     GROUP BY g_name";

/// The lines under the second (inner) hash join of an indented plan.
fn inner_join(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let indent = |line: &str| line.len() - line.trim_start().len();
    let joins: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].contains("HashJoinExec"))
        .collect();
    assert_eq!(joins.len(), 2, "{text}");
    let depth = indent(lines[joins[1]]);
    lines[joins[1] + 1..]
        .iter()
        .take_while(|line| indent(line) > depth)
        .copied()
        .collect::<Vec<_>>()
        .join("\n")
}

async fn answer(ctx: &SessionContext, sql: &str) -> Vec<String> {
    sorted_lines(&ctx.sql(sql).await.unwrap().collect().await.unwrap())
}

async fn decisions(ctx: &SessionContext, sql: &str) -> Vec<String> {
    let state = ctx.state();
    let logical = state.create_logical_plan(sql).await.unwrap();
    let optimized = state.optimize(&logical).unwrap();
    describe(&optimized, &state).await.unwrap()
}

#[tokio::test]
async fn the_filtered_dimension_is_joined_first_and_answers_do_not_change() {
    let dir = tempfile::tempdir().unwrap();
    let reordered = snowflake(dir.path(), true).await;
    let written = snowflake(dir.path(), false).await;

    let decided = decisions(&reordered, SNOWFLAKE).await;
    assert_eq!(decided.len(), 1, "{decided:?}");
    assert!(
        decided[0].contains("written: ((fact ⋈ dim) ⋈ grp)")
            && decided[0].contains("chosen: (fact ⋈ (dim ⋈ grp))"),
        "{decided:?}"
    );
    // The physical plan joins `grp` and `dim` below the join with `fact`.
    let plan = physical_plan(&reordered, SNOWFLAKE).await;
    let text = displayable(plan.as_ref()).indent(false).to_string();
    let inner = inner_join(&text);
    assert!(
        inner.contains("dim.parquet")
            && inner.contains("grp.parquet")
            && !inner.contains("fact.parquet"),
        "{text}"
    );
    let written_plan = physical_plan(&written, SNOWFLAKE).await;
    let written_text = displayable(written_plan.as_ref()).indent(false).to_string();
    assert!(
        inner_join(&written_text).contains("fact.parquet"),
        "{written_text}"
    );

    let expected = answer(&written, SNOWFLAKE).await;
    assert_eq!(answer(&reordered, SNOWFLAKE).await, expected);
    assert!(
        expected.iter().any(|line| line.contains("g7")),
        "{expected:?}"
    );
    // Switched off, the written order is kept and nothing is weighed.
    assert!(decisions(&written, SNOWFLAKE).await.is_empty());
}

#[tokio::test]
async fn orders_the_model_cannot_improve_or_cannot_build_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = snowflake(dir.path(), true).await;
    // Already the cheapest order: weighed, kept.
    let cheapest = "SELECT count(*) FROM grp, dim, fact \
                    WHERE g_name = 'g7' AND d_group = g_id AND f_dim = d_id";
    let decided = decisions(&ctx, cheapest).await;
    assert!(
        decided.len() == 1 && decided[0].contains("kept"),
        "{decided:?}"
    );
    // A table no equality links: joining it is a cross product the
    // search never builds, so the region keeps its order.
    let crossed = "SELECT count(*) FROM fact, dim, grp, other \
                   WHERE f_dim = d_id AND d_group = g_id AND g_name = 'g7' AND o_id < 3";
    assert!(decisions(&ctx, crossed).await.is_empty());
    // Outer joins are not reordered.
    let outer = "SELECT count(*) FROM fact LEFT JOIN dim ON f_dim = d_id \
                 LEFT JOIN grp ON d_group = g_id";
    assert!(decisions(&ctx, outer).await.is_empty());
    for sql in [cheapest, crossed, outer] {
        let written = snowflake(dir.path(), false).await;
        assert_eq!(
            answer(&ctx, sql).await,
            answer(&written, sql).await,
            "{sql}"
        );
    }
}

#[tokio::test]
async fn a_region_inside_a_subquery_is_reordered_too() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = snowflake(dir.path(), true).await;
    let written = snowflake(dir.path(), false).await;
    let sql = format!("SELECT o_id, (SELECT n FROM ({SNOWFLAKE})) AS n FROM other ORDER BY o_id");
    let decided = decisions(&ctx, &sql).await;
    assert!(
        decided
            .iter()
            .any(|d| d.contains("chosen: (fact ⋈ (dim ⋈ grp))")),
        "{decided:?}"
    );
    assert_eq!(answer(&ctx, &sql).await, answer(&written, &sql).await);
}

/// A `LIKE` keeps 1 % of 100,000 rows: statistics cannot weigh it (20 %),
/// the sample measures it.
#[tokio::test]
async fn a_filter_statistics_cannot_weigh_is_measured_on_a_sample() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = snowflake(dir.path(), true).await;
    let file = dir.path().join("named.parquet");
    for sql in [
        format!(
            "COPY (SELECT value AS n_id, CASE WHEN value % 100 = 0 THEN 'green ' ELSE 'blue ' END \
             || value AS n_name FROM generate_series(1, 100000)) TO '{}' STORED AS PARQUET",
            file.display()
        ),
        format!(
            "CREATE EXTERNAL TABLE named STORED AS PARQUET LOCATION '{}'",
            file.display()
        ),
    ] {
        ctx.sql(&sql).await.unwrap().collect().await.unwrap();
    }
    let state = ctx.state();
    let rows = |sql: &'static str| {
        let state = state.clone();
        async move {
            let logical = state.create_logical_plan(sql).await.unwrap();
            let leaf = state.optimize(&logical).unwrap();
            let estimate = super::estimate::estimate_leaf(&leaf, &state).await;
            estimate.unwrap().rows
        }
    };
    let green = rows("SELECT n_id FROM named WHERE n_name LIKE '%green%'").await;
    assert!((500.0..=2_000.0).contains(&green), "{green}");
    // A range of a sorted column is weighed by the statistics (the first
    // rows of the file, all under the bound, would say 100 %), and a scan
    // without a filter keeps the table's count.
    let low = rows("SELECT n_id FROM named WHERE n_id <= 50000").await;
    assert!((40_000.0..=60_000.0).contains(&low), "{low}");
    assert_eq!(rows("SELECT n_id FROM named").await, 100_000.0);
}

/// Two columns of one table in one class of equal columns (`ta.x = tb.x`,
/// `tc.x = tb.x`, `tc.x = ta.y`): whichever order is chosen, `ta.x = ta.y`
/// must still hold. Joining `ta` to `tc` on `ta.y` alone and then `tb` on
/// one key of the class answered 1,260 instead of 60.
#[tokio::test]
async fn two_columns_of_one_table_in_a_class_stay_equal() {
    let dir = tempfile::tempdir().unwrap();
    let tables = [
        (
            "ta",
            "SELECT value % 1000 AS x, value % 997 AS y FROM generate_series(0, 19999)",
        ),
        (
            "tb",
            "SELECT value % 1000 AS x FROM generate_series(0, 19999)",
        ),
        ("tc", "SELECT value AS x FROM generate_series(1, 3)"),
    ];
    let reordered = parquet_tables(dir.path(), true, &tables).await;
    let written = parquet_tables(dir.path(), false, &tables).await;
    for sql in [
        "SELECT count(*) AS n FROM ta JOIN tb ON ta.x = tb.x \
         JOIN tc ON tc.x = tb.x AND tc.x = ta.y",
        "SELECT count(*) AS n FROM ta, tb, tc WHERE ta.x = tb.x AND tc.x = tb.x AND tc.x = ta.y",
    ] {
        let decided = decisions(&reordered, sql).await;
        assert!(
            decided.iter().any(|d| d.contains("chosen")),
            "the test must reorder: {decided:?}"
        );
        let expected = answer(&written, sql).await;
        assert!(
            expected.iter().any(|line| line.contains("| 60 ")),
            "{expected:?}"
        );
        assert_eq!(answer(&reordered, sql).await, expected, "{sql}");
    }
}
